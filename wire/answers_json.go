package wire

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// The answer to every ack is written without reflection: encoding/json
// spent about 5% of the leader's CPU at 64 acking workers encoding it
// (its times through their MarshalJSON, the result compacted again).
// AppendJSON writes exactly the bytes json.Marshal writes
// (TestAckResultJSONMatchesMarshal compares them); a string that needs
// escaping goes through encoding/json itself.

// AppendJSON appends r as json.Marshal encodes it. It reports false, and
// appends nothing, for a time json.Marshal refuses (a year outside
// 0-9999): the caller lets encoding/json answer that.
func (r *AckResult) AppendJSON(b []byte) ([]byte, bool) {
	if !r.timesEncodable() {
		return b, false
	}
	b = append(b, `{"ack":`...)
	if r.Ack == nil {
		b = append(b, "null"...)
	} else {
		b = r.Ack.appendJSON(b)
	}
	b = append(b, `,"epoch":`...)
	if r.Epoch == nil {
		b = append(b, "null"...)
	} else {
		b = r.Epoch.appendJSON(b)
	}
	b = append(b, `,"completed_by_this_ack":`...)
	b = strconv.AppendBool(b, r.Completed)
	return append(b, '}'), true
}

func (r *AckResult) timesEncodable() bool {
	ok := jsonYear
	if a := r.Ack; a != nil && !ok(a.At) {
		return false
	}
	if e := r.Epoch; e != nil {
		if !ok(e.BeganAt) || !ok(e.Deadline) || (e.CompletedAt != nil && !ok(*e.CompletedAt)) || (e.EndedAt != nil && !ok(*e.EndedAt)) {
			return false
		}
	}
	return true
}

func (a *Ack) appendJSON(b []byte) []byte {
	b = append(b, `{"task":`...)
	b = AppendJSONString(b, a.Task)
	b = append(b, `,"at":`...)
	b = appendJSONTime(b, a.At)
	b = append(b, `,"delay":`...)
	b = AppendJSONString(b, time.Duration(a.Delay).String())
	b = append(b, `,"sizes":`...)
	if a.Sizes == nil {
		b = append(b, "null"...)
	} else {
		kinds := make([]Kind, 0, len(a.Sizes))
		for k := range a.Sizes {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		b = append(b, '{')
		for i, k := range kinds {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(AppendJSONString(b, string(k)), ':')
			b = strconv.AppendInt(b, int64(a.Sizes[k]), 10)
		}
		b = append(b, '}')
	}
	b = append(b, `,"content_hash":`...)
	b = AppendJSONString(b, a.ContentHash)
	b = append(b, `,"index":`...)
	b = strconv.AppendUint(b, a.Index, 10)
	if a.Lineage != 0 {
		b = append(b, `,"lineage":`...)
		b = strconv.AppendUint(b, a.Lineage, 10)
	}
	return append(b, '}')
}

func (e *Epoch) appendJSON(b []byte) []byte {
	b = append(b, `{"job":`...)
	b = AppendJSONString(b, e.Job)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendUint(b, e.Epoch, 10)
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, e.Generation, 10)
	b = append(b, `,"state":`...)
	b = AppendJSONString(b, string(e.State))
	b = append(b, `,"began_at":`...)
	b = appendJSONTime(b, e.BeganAt)
	b = append(b, `,"deadline":`...)
	b = appendJSONTime(b, e.Deadline)
	if e.CompletedAt != nil {
		b = append(b, `,"completed_at":`...)
		b = appendJSONTime(b, *e.CompletedAt)
	}
	if e.EndedAt != nil {
		b = append(b, `,"ended_at":`...)
		b = appendJSONTime(b, *e.EndedAt)
	}
	if e.Reason != "" {
		b = append(b, `,"reason":`...)
		b = AppendJSONString(b, e.Reason)
	}
	b = append(b, `,"expected":`...)
	b = strconv.AppendInt(b, int64(e.Expected), 10)
	b = append(b, `,"acked":`...)
	b = strconv.AppendInt(b, int64(e.Acked), 10)
	b = append(b, `,"payload_bytes":`...)
	b = strconv.AppendInt(b, e.PayloadBytes, 10)
	b = append(b, `,"pinned":`...)
	b = strconv.AppendBool(b, e.Pinned)
	if e.PinName != "" {
		b = append(b, `,"pin_name":`...)
		b = AppendJSONString(b, e.PinName)
	}
	b = append(b, `,"create_index":`...)
	b = strconv.AppendUint(b, e.CreateIndex, 10)
	b = append(b, `,"modify_index":`...)
	b = strconv.AppendUint(b, e.ModifyIndex, 10)
	return append(b, '}')
}

// appendJSONTime appends t as its MarshalJSON writes it (RFC 3339 with
// nanoseconds, quoted), t's year being in 0-9999.
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// AppendJSONString appends s as a JSON string, as json.Marshal writes it:
// a string of printable ASCII without quotes or backslashes goes as it is,
// its HTML characters escaped as json escapes them (\u003c, \u003e,
// \u0026: a presigned URL holds several &); any other through json.Marshal.
func AppendJSONString(b []byte, s string) []byte {
	html := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\':
			q, _ := json.Marshal(s)
			return append(b, q...)
		case c == '<' || c == '>' || c == '&':
			html = true
		}
	}
	b = append(b, '"')
	if !html {
		b = append(b, s...)
		return append(b, '"')
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '<':
			b = append(b, `\u003c`...)
		case '>':
			b = append(b, `\u003e`...)
		case '&':
			b = append(b, `\u0026`...)
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// AppendJSON appends u as json.Marshal encodes it (the answer to an
// upload-slot call: up to a thousand presigned URLs, which encoding/json
// wrote through reflection). It reports false, and appends nothing, for a
// time json.Marshal refuses.
func (u Uploads) AppendJSON(b []byte) ([]byte, bool) {
	if !jsonYear(u.LeaseUntil) || (u.Shared != nil && !jsonYear(u.Shared.ExpiresAt)) {
		return b, false
	}
	for i := range u.Uploads {
		if !jsonYear(u.Uploads[i].ExpiresAt) {
			return b, false
		}
	}
	b = append(b, `{"lease_until":`...)
	b = appendJSONTime(b, u.LeaseUntil)
	if sh := u.Shared; sh != nil {
		b = append(b, `,"shared":{"method":`...)
		b = AppendJSONString(b, sh.Method)
		b = append(b, `,"url_prefix":`...)
		b = AppendJSONString(b, sh.URLPrefix)
		b = append(b, `,"url_infix":`...)
		b = AppendJSONString(b, sh.URLInfix)
		b = appendJSONHeader(b, sh.Header)
		b = append(b, `,"expires_at":`...)
		b = appendJSONTime(b, sh.ExpiresAt)
		b = append(b, '}')
	}
	b = append(b, `,"uploads":`...)
	if u.Uploads == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range u.Uploads {
			if i > 0 {
				b = append(b, ',')
			}
			b = u.Uploads[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}

func (u *Upload) appendJSON(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = AppendJSONString(b, u.Key)
	if u.Method != "" {
		b = append(b, `,"method":`...)
		b = AppendJSONString(b, u.Method)
	}
	if u.URL != "" {
		b = append(b, `,"url":`...)
		b = AppendJSONString(b, u.URL)
	}
	if u.URLSuffix != "" {
		b = append(b, `,"url_suffix":`...)
		b = AppendJSONString(b, u.URLSuffix)
	}
	b = appendJSONHeader(b, u.Header)
	if !u.ExpiresAt.IsZero() {
		b = append(b, `,"expires_at":`...)
		b = appendJSONTime(b, u.ExpiresAt)
	}
	return append(b, '}')
}

// appendJSONHeader appends a `,"header":{...}` member for h, nothing for
// an empty h (omitempty), its names in order as json.Marshal sorts them.
func appendJSONHeader(b []byte, h http.Header) []byte {
	if len(h) == 0 {
		return b
	}
	b = append(b, `,"header":{`...)
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(AppendJSONString(b, name), ':')
		vals := h[name]
		if vals == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '[')
		for j, v := range vals {
			if j > 0 {
				b = append(b, ',')
			}
			b = AppendJSONString(b, v)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// jsonYear reports whether json.Marshal encodes t: its year is in 0-9999.
func jsonYear(t time.Time) bool { y := t.Year(); return y >= 0 && y <= 9999 }

// AppendJSON appends a as json.Marshal encodes it (AckResult.AppendJSON
// writes each ack's answer; a refusal, rare, goes through encoding/json).
// It reports false, and appends nothing, where one of them would.
func (a *AckBatchAnswer) AppendJSON(b []byte) ([]byte, bool) {
	start := len(b)
	if a.Results == nil {
		return append(b, `{"results":null}`...), true
	}
	b = append(b, `{"results":[`...)
	for i := range a.Results {
		r := &a.Results[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"status":`...)
		b = strconv.AppendInt(b, int64(r.Status), 10)
		if r.Ack != nil {
			var ok bool
			if b, ok = r.Ack.AppendJSON(append(b, `,"ack":`...)); !ok {
				return b[:start], false
			}
		}
		if r.Error != nil {
			raw, err := json.Marshal(r.Error)
			if err != nil {
				return b[:start], false
			}
			b = append(append(b, `,"error":`...), raw...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), true
}
