package wire

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// UploadsShared is what every slot of an Uploads answer in the shared form
// has in common. Slot i's URL is URLPrefix + its key + URLInfix + its
// URLSuffix; its method, header and end of lease are these.
//
// The shared form says a presigned URL's host, bucket, credential, date
// and signed headers once instead of once per slot: an answer of 300 S3
// slots is 50 KB instead of 181 KB, the API encodes it in a third of the
// time and the client decodes it (encoding/json, then Expand) in about a
// third (BenchmarkUploadsForms).
type UploadsShared struct {
	Method    string      `json:"method"`
	URLPrefix string      `json:"url_prefix"`
	URLInfix  string      `json:"url_infix"`
	Header    http.Header `json:"header,omitempty"`
	ExpiresAt time.Time   `json:"expires_at"`
}

// Share returns u in the shared form. It returns false, and u is answered
// in full, when the slots differ in more than their keys and their URLs'
// ends: another method, header or lease, or a URL that does not hold its
// key after a prefix common to all (a key the URL escapes).
func (u Uploads) Share() (Uploads, bool) {
	if u.Shared != nil || len(u.Uploads) == 0 {
		return u, false
	}
	first := u.Uploads[0]
	at := strings.Index(first.URL, first.Key)
	if at < 0 || first.Key == "" {
		return u, false
	}
	prefix := first.URL[:at]
	infix := ""
	names := slices.Collect(maps.Keys(first.Header))
	sameHeader := func(h http.Header) bool {
		if len(h) != len(names) {
			return false
		}
		for _, name := range names { // every name of first's, and as many: the same names
			if v, ok := h[name]; !ok || !slices.Equal(v, first.Header[name]) {
				return false
			}
		}
		return true
	}
	for i, s := range u.Uploads {
		if s.Method != first.Method || !s.ExpiresAt.Equal(first.ExpiresAt) || s.URLSuffix != "" || !sameHeader(s.Header) ||
			!strings.HasPrefix(s.URL, prefix) || !strings.HasPrefix(s.URL[len(prefix):], s.Key) {
			return u, false
		}
		rest := s.URL[len(prefix)+len(s.Key):]
		if i == 0 {
			infix = rest
			continue
		}
		if !strings.HasPrefix(rest, infix) {
			n := 0
			for n < len(infix) && n < len(rest) && infix[n] == rest[n] {
				n++
			}
			infix = infix[:n]
		}
	}
	out := Uploads{
		LeaseUntil: u.LeaseUntil,
		Shared: &UploadsShared{Method: first.Method, URLPrefix: prefix, URLInfix: infix,
			Header: first.Header, ExpiresAt: first.ExpiresAt},
		Uploads: make([]Upload, len(u.Uploads)),
	}
	for i, s := range u.Uploads {
		out.Uploads[i] = Upload{Key: s.Key, URLSuffix: s.URL[len(prefix)+len(s.Key)+len(infix):]}
	}
	return out, true
}

// Expand turns an answer in the shared form into the full form: each slot
// gets its URL, method, header (a copy of its own) and end of lease. An
// answer in the full form is left as it is.
func (u *Uploads) Expand() {
	sh := u.Shared
	if sh == nil {
		return
	}
	for i := range u.Uploads {
		s := &u.Uploads[i]
		s.URL = sh.URLPrefix + s.Key + sh.URLInfix + s.URLSuffix
		s.URLSuffix = ""
		s.Method = sh.Method
		s.Header = sh.Header.Clone()
		s.ExpiresAt = sh.ExpiresAt
	}
	u.Shared = nil
}
