package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// The tests of this file pin the checks of the client's blob transfers
// (blobs.go) and of its restore reads (restore.go) against fake members
// and object stores on loopback.

// blobMember serves a restore plan (GET .../restore) and the ranged reads
// of one blob (GET /v1/objects/{key}); read answers each read, n counting
// them from 1, and records its query.
type blobMember struct {
	url  string
	blob []byte
	plan any
	read func(n int, off, length int, w http.ResponseWriter, r *http.Request)

	mu      sync.Mutex
	queries []url.Values
	restore url.Values
}

// sendRange writes length bytes of blob at off as a complete answer.
func sendRange(w http.ResponseWriter, blob []byte, off, length int) {
	w.Header().Set("Content-Length", strconv.Itoa(length))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(blob[off : off+length])
}

// breakOff promises length bytes, sends the first part of them and breaks
// the connection.
func breakOff(w http.ResponseWriter, blob []byte, off, length, part int) {
	w.Header().Set("Content-Length", strconv.Itoa(length))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(blob[off : off+part])
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

func newBlobMember(t *testing.T, size int) *blobMember {
	m := &blobMember{blob: make([]byte, size)}
	for i := range m.blob {
		m.blob[i] = byte('a' + i%26)
	}
	m.read = func(_ int, off, length int, w http.ResponseWriter, _ *http.Request) {
		sendRange(w, m.blob, off, length)
	}
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/restore") {
			m.mu.Lock()
			m.restore = r.URL.Query()
			m.mu.Unlock()
			answer(w, http.StatusOK, m.plan)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/v1/objects/") || r.Method != http.MethodGet {
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			return
		}
		q := r.URL.Query()
		m.mu.Lock()
		m.queries = append(m.queries, q)
		n := len(m.queries)
		m.mu.Unlock()
		off, _ := strconv.Atoi(q.Get("offset"))
		length := len(m.blob) - off
		if l := q.Get("length"); l != "" {
			length, _ = strconv.Atoi(l)
		}
		m.read(n, off, length, w, r)
	})
	m.url = srv.URL
	return m
}

func (m *blobMember) reads() []url.Values {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]url.Values(nil), m.queries...)
}

// restorePlan is a plan whose state is restored from one range of the
// blob (no CRC32C), with a read grant for it.
func restorePlan(seg manifests.Segment) any {
	return struct {
		wire.RestorePlan
		ObjectGrants map[string]string `json:"object_grants"`
	}{
		RestorePlan: wire.RestorePlan{Job: "j", Task: "t", Status: wire.RestoreRestored, Source: wire.RestoreSource{Job: "j", Task: "t", Epoch: 3},
			Kinds: map[wire.Kind]wire.KindRestore{wire.KindState: {Status: wire.RestoreRestored, Manifest: &manifests.Manifest{Segments: []manifests.Segment{seg}}}}},
		ObjectGrants: map[string]string{seg.Key: "expires=99&sig=granted"},
	}
}

// readAll reads r to its end, failing the test if that does not end: a
// reader that loops without progress is a failure, not a hang.
func readAll(t *testing.T, r io.Reader) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		return res.b, res.err
	case <-time.After(30 * time.Second):
		t.Fatal("the state reader does not end")
		return nil, nil
	}
}

// TestRestoreAsksForTheSource: Restore asks for the epoch, savepoint,
// source job and source task the options name.
func TestRestoreAsksForTheSource(t *testing.T) {
	m := newBlobMember(t, 10)
	m.plan = wire.RestorePlan{Job: "j", Task: "t", Status: wire.RestoreNoCheckpoint}
	c := proxiedClient(t, 2, m.url)
	for _, tc := range []struct {
		opts client.RestoreOptions
		want string
	}{
		{client.RestoreOptions{}, ""},
		{client.RestoreOptions{Epoch: 5, SourceJob: "old", SourceTask: "t0"}, "epoch=5&source_job=old&source_task=t0"},
		{client.RestoreOptions{Pin: "sp", SourceJob: "old"}, "pin=sp&source_job=old"},
	} {
		if _, err := c.Restore(ctxT(t), "j", "t", tc.opts); err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		got := m.restore.Encode()
		m.mu.Unlock()
		if got != tc.want {
			t.Errorf("restore %+v asked %q, want %q", tc.opts, got, tc.want)
		}
	}
}

// TestStateReaderReadsTheRange: OpenState reads exactly the plan's range,
// whatever the object store sends: the rest of a range whose body broke
// off is read from where it broke, bytes past the range are not returned,
// a blob that ends before the range is an error, and a range that keeps
// breaking off fails after MaxAttempts reads.
func TestStateReaderReadsTheRange(t *testing.T) {
	seg := manifests.Segment{Key: "j/t/blob", Offset: 10, Length: 40, FirstSeq: 1, LastSeq: 1}
	for _, tc := range []struct {
		name  string
		read  func(m *blobMember) func(n, off, length int, w http.ResponseWriter, r *http.Request)
		reads []string // the queries, in order
		fails bool
	}{
		{"broken off once", func(m *blobMember) func(n, off, length int, w http.ResponseWriter, r *http.Request) {
			return func(n, off, length int, w http.ResponseWriter, _ *http.Request) {
				if n == 1 {
					breakOff(w, m.blob, off, length, 15)
					return
				}
				sendRange(w, m.blob, off, length)
			}
		}, []string{"expires=99&length=40&offset=10&sig=granted", "expires=99&length=25&offset=25&sig=granted"}, false},
		{"past the range", func(m *blobMember) func(n, off, length int, w http.ResponseWriter, r *http.Request) {
			return func(_, off, _ int, w http.ResponseWriter, _ *http.Request) {
				sendRange(w, m.blob, off, len(m.blob)-off)
			}
		}, []string{"expires=99&length=40&offset=10&sig=granted"}, false},
		{"blob too short", func(m *blobMember) func(n, off, length int, w http.ResponseWriter, r *http.Request) {
			return func(_, off, _ int, w http.ResponseWriter, _ *http.Request) { sendRange(w, m.blob, off, 20) }
		}, []string{"expires=99&length=40&offset=10&sig=granted"}, true},
		{"broken off every time", func(m *blobMember) func(n, off, length int, w http.ResponseWriter, r *http.Request) {
			return func(_, off, length int, w http.ResponseWriter, _ *http.Request) { breakOff(w, m.blob, off, length, 5) }
		}, []string{"expires=99&length=40&offset=10&sig=granted", "expires=99&length=35&offset=15&sig=granted", "expires=99&length=30&offset=20&sig=granted"}, true},
	} {
		m := newBlobMember(t, 100)
		m.plan = restorePlan(seg)
		m.read = tc.read(m)
		c := proxiedClient(t, 3, m.url)
		r, err := c.Restore(ctxT(t), "j", "t", client.RestoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rc, err := r.OpenState(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(t, rc)
		rc.Close()
		if tc.fails && err == nil {
			t.Errorf("%s: read %d bytes without an error", tc.name, len(got))
		}
		if !tc.fails && (err != nil || !bytes.Equal(got, m.blob[10:50])) {
			t.Errorf("%s: read %q, %v; want %q", tc.name, got, err, m.blob[10:50])
		}
		var asked []string
		for _, q := range m.reads() {
			asked = append(asked, q.Encode())
		}
		if strings.Join(asked, " ") != strings.Join(tc.reads, " ") {
			t.Errorf("%s: reads %q, want %q", tc.name, asked, tc.reads)
		}
	}
}

// TestReadRangeChecks: ReadRange returns an error answer at once (it is
// not a broken read), and never returns fewer bytes than the range.
func TestReadRangeChecks(t *testing.T) {
	seg := manifests.Segment{Key: "j/t/blob", Offset: 10, Length: 40}
	m := newBlobMember(t, 100)
	c := proxiedClient(t, 3, m.url)

	m.read = func(_, _, _ int, w http.ResponseWriter, _ *http.Request) {
		refuse(w, http.StatusNotFound, wire.CodeNotFound, false)
	}
	if _, err := c.ReadRange(ctxT(t), seg); !errors.Is(err, client.ErrNotFound) || len(m.reads()) != 1 {
		t.Errorf("range of a missing blob: %v after %d reads; want ErrNotFound after 1", err, len(m.reads()))
	}
	m.read = func(_, off, _ int, w http.ResponseWriter, _ *http.Request) { sendRange(w, m.blob, off, 20) }
	if b, err := c.ReadRange(ctxT(t), seg); err == nil || len(m.reads()) != 4 {
		t.Errorf("range past the end of the blob: %d bytes, %v after %d reads; want an error after 1+3", len(b), err, len(m.reads()))
	}
}

// TestReadBlobAsks: ReadBlob asks for the range it is given (length 0
// included) and refuses a negative offset without a request.
func TestReadBlobAsks(t *testing.T) {
	m := newBlobMember(t, 100)
	c := proxiedClient(t, 2, m.url)
	rc, err := c.ReadBlob(ctxT(t), "j/t/blob", 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || len(b) != 0 {
		t.Errorf("ReadBlob of 0 bytes: %q %v", b, err)
	}
	if _, err := c.ReadBlob(ctxT(t), "j/t/blob", -1, 5); err == nil {
		t.Error("ReadBlob at offset -1: no error")
	}
	reads := m.reads()
	if len(reads) != 1 || reads[0].Encode() != "length=0&offset=5" {
		t.Errorf("reads %v, want one of length 0 at 5", reads)
	}
}

// putMember answers blob uploads: put answers each, n counting them from
// 1, with the body it read.
type putMember struct {
	url  string
	put  func(n int, body []byte, w http.ResponseWriter, r *http.Request)
	puts atomic.Int32
	mu   sync.Mutex // held while put runs
}

func newPutMember(t *testing.T, put func(n int, body []byte, w http.ResponseWriter, r *http.Request)) *putMember {
	m := &putMember{put: put}
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // the client broke off its request
		}
		n := int(m.puts.Add(1))
		m.mu.Lock()
		defer m.mu.Unlock()
		m.put(n, body, w, r)
	})
	m.url = srv.URL
	return m
}

// locked runs f holding the lock put runs under: what put recorded is
// then seen whole.
func (m *putMember) locked(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

func dropAnswer(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

var blobData = []byte("0123456789abcdefghijklmnopqrstuvwxyz")

// TestPutObjectOutcomes: what PutObject makes of the object store's and
// the member's answers.
func TestPutObjectOutcomes(t *testing.T) {
	xml500 := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "<Error><Code>InternalError</Code></Error>")
	}
	for _, tc := range []struct {
		name      string
		path      string // of the slot's URL
		put       func(n int, w http.ResponseWriter)
		puts      int32
		ok        bool
		unknown   bool
		checkBody bool
	}{
		{"412 at the first attempt", "/b/j/t/k", func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusPreconditionFailed) }, 1, false, false, false},
		// The member's 412 is not taken as the object's existence (the
		// slot's own URL's is), but the lost attempt may have landed.
		{"412 from the member after a lost answer", "/v1/objects/j/t/k", func(n int, w http.ResponseWriter) {
			if n == 1 {
				dropAnswer(w)
				return
			}
			w.WriteHeader(http.StatusPreconditionFailed)
		}, 2, false, true, false},
		{"object store's 500, then stored", "/b/j/t/k", func(n int, w http.ResponseWriter) {
			if n == 1 {
				xml500(w)
			}
		}, 2, true, false, true},
		{"answers lost", "/b/j/t/k", func(_ int, w http.ResponseWriter) { dropAnswer(w) }, 3, false, true, false},
		{"gateway timeouts", "/b/j/t/k", func(_ int, w http.ResponseWriter) { page(w, http.StatusGatewayTimeout) }, 3, false, true, false},
		{"503 every time", "/b/j/t/k", func(_ int, w http.ResponseWriter) {
			refuse(w, http.StatusServiceUnavailable, wire.CodeUnavailable, true)
		}, 3, false, false, false},
		{"a redirect", "/b/j/t/k", func(_ int, w http.ResponseWriter) {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusTemporaryRedirect)
		}, 1, false, false, false},
	} {
		var last []byte
		m := newPutMember(t, func(n int, body []byte, w http.ResponseWriter, _ *http.Request) {
			last = body
			tc.put(n, w)
		})
		c := proxiedClient(t, 3, m.url)
		slot := client.UploadSlot{Key: "j/t/k", Method: http.MethodPut, URL: m.url + tc.path}
		err := c.PutObject(ctxT(t), slot, bytes.NewReader(blobData), int64(len(blobData)))
		if (err == nil) != tc.ok || errors.Is(err, client.ErrOutcomeUnknown) != tc.unknown || m.puts.Load() != tc.puts {
			t.Errorf("%s: %v after %d PUTs; want success %v, outcome unknown %v after %d", tc.name, err, m.puts.Load(), tc.ok, tc.unknown, tc.puts)
		}
		m.locked(func() {
			if tc.checkBody && !bytes.Equal(last, blobData) {
				t.Errorf("%s: stored %q", tc.name, last)
			}
		})
	}
}

// TestPutObjectCallerGivesUp: an upload whose caller gives up while it is
// at the object store has an unknown outcome.
func TestPutObjectCallerGivesUp(t *testing.T) {
	arrived := make(chan struct{}, 1)
	m := newPutMember(t, func(_ int, _ []byte, _ http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	c := proxiedClient(t, 3, m.url)
	ctx, cancel := context.WithCancel(ctxT(t))
	go func() {
		<-arrived
		cancel()
	}()
	err := c.PutObject(ctx, client.UploadSlot{Key: "j/t/k", URL: m.url + "/b/j/t/k"}, bytes.NewReader(blobData), int64(len(blobData)))
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Errorf("upload cancelled at the store: %v; want outcome unknown (context cancelled)", err)
	}
}

// TestPutObjectResendsTheSameBytes: a retried upload sends the same bytes:
// a seekable body from where it stood, a body that cannot be rewound is not
// sent again once read.
func TestPutObjectResendsTheSameBytes(t *testing.T) {
	var bodies [][]byte
	m := newPutMember(t, func(n int, body []byte, w http.ResponseWriter, _ *http.Request) {
		bodies = append(bodies, body)
		if n == 1 {
			dropAnswer(w)
		}
	})
	c := proxiedClient(t, 3, m.url)
	slot := client.UploadSlot{Key: "j/t/k", URL: m.url + "/b/j/t/k"}
	r := bytes.NewReader(blobData)
	if _, err := r.Seek(4, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if err := c.PutObject(ctxT(t), slot, r, 10); err != nil {
		t.Fatal(err)
	}
	m.locked(func() {
		if len(bodies) != 2 || string(bodies[0]) != string(blobData[4:14]) || string(bodies[1]) != string(blobData[4:14]) {
			t.Errorf("seekable body from offset 4: sent %q, want %q twice", bodies, blobData[4:14])
		}
		bodies = nil
	})
	m.puts.Store(0)
	before := c.Stats()
	once := struct{ io.Reader }{bytes.NewReader(blobData)}
	if err := c.PutObject(ctxT(t), slot, once, int64(len(blobData))); err == nil {
		t.Fatal("an upload whose answer was lost and whose body cannot be sent again succeeded")
	}
	m.locked(func() {
		if d := c.Stats().Sub(before); d.ObjectPuts != 1 || len(bodies) != 1 {
			t.Errorf("a body that cannot be rewound: %d PUTs sent, %d at the store; want 1", d.ObjectPuts, len(bodies))
		}
	})
}

// TestPutObjectToMetastoreMovesOn: a PUT to the metastore's /v1/objects
// that cannot reach the member the slot names (unreachable, or answering
// 503) goes to the client's other endpoints with the same path and query.
func TestPutObjectToMetastoreMovesOn(t *testing.T) {
	l, dead := freeAddr(t)
	l.Close()
	unavailable := fakeMember(t, func(w http.ResponseWriter, r *http.Request) {
		refuse(w, http.StatusServiceUnavailable, wire.CodeUnavailable, true)
	})
	for _, first := range []string{"http://" + dead, unavailable.URL} {
		var got []string
		m := newPutMember(t, func(_ int, body []byte, _ http.ResponseWriter, r *http.Request) {
			got = append(got, r.URL.RequestURI()+" "+string(body))
		})
		c := proxiedClient(t, 3, first, m.url)
		slot := client.UploadSlot{Key: "j/t/k", URL: first + "/v1/objects/j/t/k?expires=9&sig=s"}
		if err := c.PutObject(ctxT(t), slot, bytes.NewReader(blobData), int64(len(blobData))); err != nil {
			t.Fatalf("slot on %s: %v", first, err)
		}
		m.locked(func() {
			if want := "/v1/objects/j/t/k?expires=9&sig=s " + string(blobData); len(got) != 1 || got[0] != want {
				t.Errorf("slot on %s: the other endpoint got %q, want %q", first, got, want)
			}
		})
	}
}

// TestUploadSlotsNone: an answer without a slot is an error, not a panic
// of Upload.
func TestUploadSlotsNone(t *testing.T) {
	srv := fakeMember(t, func(w http.ResponseWriter, r *http.Request) { answer(w, http.StatusOK, wire.Uploads{}) })
	c := proxiedClient(t, 2, srv.URL)
	if _, err := c.Upload(ctxT(t), "j", 1, "t", bytes.NewReader(blobData), int64(len(blobData))); err == nil {
		t.Fatal("Upload with no slot in the answer: no error")
	}
}

// TestStateReaderClosed: a state reader closed before its end reads
// nothing more.
func TestStateReaderClosed(t *testing.T) {
	m := newBlobMember(t, 100)
	m.plan = restorePlan(manifests.Segment{Key: "j/t/blob", Offset: 10, Length: 40, FirstSeq: 1, LastSeq: 1})
	c := proxiedClient(t, 2, m.url)
	r, err := c.Restore(ctxT(t), "j", "t", client.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := r.OpenState(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if n, err := rc.Read(make([]byte, 10)); n != 0 || err == nil || len(m.reads()) != 0 {
		t.Fatalf("Read after Close: %d bytes, %v, %d blob reads; want an error and no read", n, err, len(m.reads()))
	}
}
