package s3server

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	bolt "go.etcd.io/bbolt"
)

// DBFile is the name of the bbolt file, in Options.Dir, that holds the
// buckets and objects of a server that keeps them on disk.
const DBFile = "s3server.bolt"

// MaxDeleteObjects is the most keys one DeleteObjects request may carry, as
// on AWS; a larger request is refused with MalformedXML.
const MaxDeleteObjects = 1000

// maxDeleteBody bounds the body of a DeleteObjects request: 1,000 keys of
// 1,024 bytes fit many times over.
const maxDeleteBody = 8 << 20

// Options configures a Server.
type Options struct {
	// Dir keeps buckets and objects in Dir/DBFile (bbolt), so they survive a
	// restart. Empty: in memory.
	Dir string
	// Buckets are created at start if missing.
	Buckets []string
	// AutoBucket creates a missing bucket on first use instead of answering
	// NoSuchBucket. Off by default, so a misnamed bucket fails a test.
	AutoBucket bool
	// AccessKeyID and SecretAccessKey, when set, are the only credentials
	// the server accepts: every request must carry a valid Signature
	// Version 4 signature made with them, in the Authorization header or as
	// a presigned URL that has not expired. Empty: anyone may do anything.
	AccessKeyID     string
	SecretAccessKey string
	// Logger receives gofakes3's request log. Nil: no log.
	Logger *log.Logger
	// Now is the clock that presigned URLs expire by. Nil: time.Now.
	Now func() time.Time
}

// Server is an S3-protocol HTTP handler: gofakes3 behind a SigV4 check and
// AWS's limit on DeleteObjects.
type Server struct {
	fake    *gofakes3.GoFakeS3
	backend gofakes3.Backend
	handler http.Handler
	auth    *verifier
	db      *bolt.DB
}

var _ http.Handler = (*Server)(nil)

// New builds a server. Close releases its database file.
func New(opts Options) (*Server, error) {
	if (opts.AccessKeyID == "") != (opts.SecretAccessKey == "") {
		return nil, errors.New("s3server: set both the access key id and the secret access key, or neither")
	}
	s := &Server{}
	if opts.Dir == "" {
		s.backend = s3mem.New()
	} else {
		if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
			return nil, fmt.Errorf("s3server: %w", err)
		}
		db, err := bolt.Open(filepath.Join(opts.Dir, DBFile), 0o600, &bolt.Options{Timeout: 2 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("s3server: open %s: %w", filepath.Join(opts.Dir, DBFile), err)
		}
		s.db = db
		s.backend = &lockedBackend{b: s3bolt.New(db)}
	}
	fakeOpts := []gofakes3.Option{gofakes3.WithAutoBucket(opts.AutoBucket)}
	if opts.Logger != nil {
		fakeOpts = append(fakeOpts, gofakes3.WithLogger(gofakes3.StdLog(opts.Logger, gofakes3.LogErr, gofakes3.LogWarn, gofakes3.LogInfo)))
	}
	s.fake = gofakes3.New(s.backend, fakeOpts...)
	s.handler = s.fake.Server()
	if opts.AccessKeyID != "" {
		now := opts.Now
		if now == nil {
			now = time.Now
		}
		s.auth = &verifier{accessKey: opts.AccessKeyID, secret: opts.SecretAccessKey, now: now}
	}
	for _, b := range opts.Buckets {
		if err := s.CreateBucket(b); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// CreateBucket creates the bucket if it does not exist yet.
func (s *Server) CreateBucket(name string) error {
	if err := gofakes3.ValidateBucketName(name); err != nil {
		return fmt.Errorf("s3server: bucket %q: %w", name, err)
	}
	exists, err := s.backend.BucketExists(name)
	if err != nil {
		return fmt.Errorf("s3server: bucket %q: %w", name, err)
	}
	if exists {
		return nil
	}
	if err := s.backend.CreateBucket(name); err != nil && !gofakes3.IsAlreadyExists(err) {
		return fmt.Errorf("s3server: create bucket %q: %w", name, err)
	}
	return nil
}

// Close closes the database file of a server with a Dir.
func (s *Server) Close() error {
	if s.db == nil {
		return nil
	}
	return s.db.Close()
}

// ServeHTTP checks the signature, enforces the DeleteObjects limit and hands
// the request to gofakes3.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e := refuseTrailers(r); e != nil {
		writeError(w, r, e)
		return
	}
	if s.auth != nil {
		if e := s.auth.verify(r); e != nil {
			writeError(w, r, e)
			return
		}
	}
	if r.Method == http.MethodPost && r.URL.Query().Has("delete") {
		if e := limitDeleteObjects(r); e != nil {
			writeError(w, r, e)
			return
		}
	}
	s.handler.ServeHTTP(w, r)
}

// refuseTrailers refuses aws-chunked bodies with trailing checksums, which
// recent AWS SDKs send over HTTPS by default. gofakes3 only decodes
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD and would store any other chunked body
// verbatim, framing and trailer included: a loud error beats a corrupt object.
func refuseTrailers(r *http.Request) *s3Error {
	mode := r.Header.Get("X-Amz-Content-Sha256")
	if strings.HasPrefix(mode, "STREAMING-") && mode != "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" {
		return &s3Error{status: http.StatusNotImplemented, code: "NotImplemented",
			msg: mode + " bodies (aws-chunked with trailing checksums) are not supported by this test server; " +
				"configure the client with RequestChecksumCalculation WhenRequired"}
	}
	return nil
}

// limitDeleteObjects refuses a DeleteObjects request of more than
// MaxDeleteObjects keys, which gofakes3 would accept and AWS does not.
func limitDeleteObjects(r *http.Request) *s3Error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxDeleteBody+1))
	_ = r.Body.Close()
	if err != nil {
		return &s3Error{status: http.StatusBadRequest, code: "IncompleteBody", msg: err.Error()}
	}
	if len(body) > maxDeleteBody {
		return &s3Error{status: http.StatusBadRequest, code: "MalformedXML", msg: "DeleteObjects body too large"}
	}
	var req struct {
		Objects []struct {
			Key string `xml:"Key"`
		} `xml:"Object"`
	}
	if err := xml.Unmarshal(body, &req); err != nil {
		return &s3Error{status: http.StatusBadRequest, code: "MalformedXML", msg: err.Error()}
	}
	if len(req.Objects) > MaxDeleteObjects {
		return &s3Error{status: http.StatusBadRequest, code: "MalformedXML",
			msg: fmt.Sprintf("The XML you provided was not well-formed or did not validate against our published schema: %d keys, at most %d allowed", len(req.Objects), MaxDeleteObjects)}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// s3Error is an error answer in S3's XML form.
type s3Error struct {
	status int
	code   string
	msg    string
}

func writeError(w http.ResponseWriter, r *http.Request, e *s3Error) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(e.status)
	if r.Method == http.MethodHead {
		return
	}
	body := struct {
		XMLName xml.Name `xml:"Error"`
		Code    string   `xml:"Code"`
		Message string   `xml:"Message"`
	}{Code: e.code, Message: e.msg}
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(body)
}
