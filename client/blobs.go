package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// UploadSlot is where to upload one blob: a key held by an upload intent
// with a lease, and the request to send (a presigned PUT to the object
// store, or the metastore's /v1/objects/{key} with the local blob store).
type UploadSlot = wire.Upload

// UploadSlots asks for count upload slots for task (count 0 means 1; at
// most wire.MaxIntents). Each call hands out fresh keys, so it is the one
// call of the API that is not idempotent by content; retrying it (as the
// client does on a failure whose outcome is unknown) is still harmless: a
// slot nothing commits expires with its lease and the garbage collector
// deletes whatever was uploaded to it. The answer is asked for in its
// shared form (?shared=true: what the slots share said once), which a
// member of an earlier release ignores; both forms are read.
func (c *Client) UploadSlots(ctx context.Context, job string, gen uint64, task string, count int) ([]UploadSlot, error) {
	var out wire.Uploads
	body := wire.UploadsRequest{Generation: gen, Task: task, Count: count}
	if err := c.mutateQuery(ctx, http.MethodPost, jobPath(job)+"/uploads", url.Values{"shared": {"true"}}, body, &out); err != nil {
		return nil, err
	}
	out.Expand()
	if len(out.Uploads) == 0 {
		return nil, fmt.Errorf("metastore: POST %s/uploads: the answer holds no upload slot", jobPath(job))
	}
	return out.Uploads, nil
}

// Upload uploads size bytes of body as a new blob of task and returns its
// key: it asks for an upload slot (POST /v1/jobs/{job}/uploads, see
// UploadSlots for why a retry of it is harmless), then PUTs the body where
// the slot says (PutObject). The blob becomes part of the task's state when
// an ack commits it: TaskState.AddBlob, then AddSegment or Materialize.
func (c *Client) Upload(ctx context.Context, job string, gen uint64, task string, body io.Reader, size int64) (string, error) {
	slots, err := c.UploadSlots(ctx, job, gen, task, 1)
	if err != nil {
		return "", err
	}
	if err := c.PutObject(ctx, slots[0], body, size); err != nil {
		return "", err
	}
	return slots[0].Key, nil
}

// PutObject uploads size bytes of body to a slot. An attempt may take
// Config.RequestTimeout plus one second per MinUploadRate bytes. A failed PUT is repeated
// (the same bytes to the same key, which is idempotent) when the body can
// be sent again: when it is an io.Seeker (bytes.Reader, os.File), or when
// nothing of it was read yet. A presigned S3 URL creates its object once
// (If-None-Match: *): a repeated PUT answered 412 means an earlier attempt
// landed, and is success. A PUT to the metastore's /v1/objects that
// cannot reach the member the slot names goes to the client's other
// endpoints, which forward it to the leader. The body is never closed.
// When an attempt's answer was lost (the object may exist) and the upload
// then ends without a definite answer (attempts used up, the body cannot be
// sent again, a later attempt refused, or ctx done), the error matches
// ErrOutcomeUnknown. A context error without ErrOutcomeUnknown means
// nothing was uploaded.
func (c *Client) PutObject(ctx context.Context, slot UploadSlot, body io.Reader, size int64) error {
	if size < 0 {
		return fmt.Errorf("client: PutObject: negative size %d", size)
	}
	target, err := url.Parse(slot.URL)
	if err != nil {
		return fmt.Errorf("client: upload slot %q: bad URL: %w", slot.Key, err)
	}
	method := slot.Method
	if method == "" {
		method = http.MethodPut
	}
	metastore := strings.HasPrefix(target.Path, "/v1/objects/")
	seeker, _ := body.(io.Seeker)
	var start int64
	if seeker != nil {
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			seeker = nil
		}
	}
	unknown := false
	var last error
	endpoint := -1 // -1: the slot's own URL; else an index of the rotation
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			c.retries.Add(1)
		}
		if err := ctx.Err(); err != nil {
			// The caller gave up before this attempt was sent.
			if unknown {
				return &RetryError{Method: method, Path: target.Path, Attempts: max(attempt-1, 1), Unknown: true, Last: err}
			}
			return fmt.Errorf("metastore: %s %s: %w", method, target.Path, err)
		}
		u := *target
		if endpoint >= 0 {
			_, base := c.current()
			bu, _ := url.Parse(base)
			u.Scheme, u.Host = bu.Scheme, bu.Host
		}
		cr := &countingReader{r: io.LimitReader(body, size)}
		err := c.putOnce(ctx, method, u.String(), slot.Header, cr, size)
		if err == nil {
			c.bytesPut.Add(size)
			return nil
		}
		retry, moveOn := false, false
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusPreconditionFailed && attempt > 1 && !metastore {
			// The slot's URL is conditional (If-None-Match: *): the object
			// exists, so an earlier attempt of this upload landed although
			// its answer was lost. The leader's observation after the ack
			// checks its size.
			c.bytesPut.Add(size)
			return nil
		}
		if errors.As(err, &ae) {
			retry = ae.Retryable || ae.Status >= 500 || ae.Status == http.StatusTooManyRequests
			moveOn = ae.Status == http.StatusBadGateway || ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout
			if retry && outcomeUnknownAnswer(ae) {
				unknown = true
			}
		} else {
			retry, moveOn = true, true
			if sentMaybe(err) {
				unknown = true
			}
		}
		last = err
		resend := cr.n == 0
		if !resend && seeker != nil {
			_, serr := seeker.Seek(start, io.SeekStart)
			resend = serr == nil
		}
		if !retry || !resend {
			if unknown && (retry || !errors.Is(err, ErrInvalid)) {
				// The body cannot be sent again, or this attempt was
				// refused (an expired URL, say), and an earlier or this
				// attempt may have landed. A malformed request could not
				// have landed before either.
				return &RetryError{Method: method, Path: u.Path, Attempts: attempt, Unknown: true, Last: err}
			}
			return err
		}
		if ctx.Err() != nil {
			if unknown {
				return &RetryError{Method: method, Path: u.Path, Attempts: attempt, Unknown: true, Last: ctx.Err()}
			}
			return fmt.Errorf("metastore: %s %s: %w", method, u.Path, ctx.Err())
		}
		if attempt >= c.cfg.MaxAttempts {
			return &RetryError{Method: method, Path: u.Path, Attempts: attempt, Unknown: unknown, Last: last}
		}
		if moveOn && metastore {
			// Send the rest through the client's endpoints, past the one
			// that just failed.
			if i, base := c.current(); base == u.Scheme+"://"+u.Host {
				c.rotate(i, ae == nil && !sentMaybe(err))
			}
			endpoint, _ = c.current()
		}
		c.logger.Debug("metastore client: retrying upload", "key", slot.Key, "attempt", attempt, "err", err)
		var after time.Duration
		if ae != nil {
			after = ae.RetryAfter
		}
		if err := c.backoff(ctx, attempt, after); err != nil {
			if unknown {
				return &RetryError{Method: method, Path: u.Path, Attempts: attempt, Unknown: true, Last: err}
			}
			return fmt.Errorf("metastore: %s %s: %w (last failure: %v)", method, u.Path, err, last)
		}
	}
}

func (c *Client) putOnce(ctx context.Context, method, u string, header http.Header, body io.Reader, size int64) error {
	// The request's body hides any Close method: the transport closes a
	// request body, and the caller's (an *os.File) must stay open.
	actx, cancel := context.WithTimeout(ctx, uploadTimeout(c.cfg.RequestTimeout, size))
	defer cancel()
	req, err := http.NewRequestWithContext(actx, method, u, io.NopCloser(body))
	if err != nil {
		return err
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	c.count(classObjectPut)
	resp, err := c.hc.Do(req)
	if err != nil {
		return timeoutErr(redactURL(err), actx, ctx)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return timeoutErr(err, actx, ctx)
	}
	if resp.StatusCode/100 != 2 {
		ae := decodeError(resp.StatusCode, raw, method, req.URL.Path)
		ae.RetryAfter = retryAfter(resp.Header)
		return ae
	}
	return nil
}

// MinUploadRate is the slowest upload PutObject waits for: an attempt may
// take RequestTimeout plus one second per MinUploadRate bytes.
const MinUploadRate = 1 << 20

func uploadTimeout(base time.Duration, size int64) time.Duration {
	return base + time.Duration(size/MinUploadRate)*time.Second
}

type countingReader struct {
	r io.Reader
	n int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}

// ReadBlob reads length bytes of a live blob from offset (length < 0: to
// the end) through GET /v1/objects/{key}?offset=&length=. The attempts until
// the answer's headers arrive follow the client's retry rules (a read is
// always safe to repeat); the body is then the caller's to read and close,
// bounded by ctx only. The reader checks neither the number of bytes nor
// their checksum: Restore.OpenState and ReadRange do.
func (c *Client) ReadBlob(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	return c.readBlob(ctx, key, offset, length, "")
}

// ReadRange reads the Length bytes of rg's blob at rg.Offset (a base or
// segment of a restore plan, as Restore.Ranges lists them) and, when rg
// declares a CRC32C, verifies them: a read whose bytes do not match (or
// that breaks off, or ends short) is repeated, up to Config.MaxAttempts
// reads, after which the error is a *ChecksumError (ErrChecksum) naming
// the key, offset, length, the CRC32C wanted and the one read. The whole
// range is held in memory, so no byte reaches the caller unverified.
// Without auth's read grants; Restore.OpenState reads with them.
func (c *Client) ReadRange(ctx context.Context, rg manifests.Segment) ([]byte, error) {
	return c.readRange(ctx, rg, "")
}

func (c *Client) readRange(ctx context.Context, rg manifests.Segment, grant string) ([]byte, error) {
	for attempt := 1; ; attempt++ {
		b, err := c.readRangeOnce(ctx, rg, grant)
		var fail error
		switch {
		case err != nil && !errors.Is(err, errRangeBroken):
			return nil, err
		case err != nil:
			fail = err
		case rg.CRC32C == "":
			return b, nil
		default:
			got := manifests.CRC32C(b)
			if got == rg.CRC32C {
				return b, nil
			}
			fail = &ChecksumError{Key: rg.Key, Offset: rg.Offset, Length: rg.Length, Want: rg.CRC32C, Got: got, Attempts: attempt}
		}
		if attempt >= c.cfg.MaxAttempts || ctx.Err() != nil {
			return nil, fail
		}
		c.retries.Add(1)
		c.logger.Debug("metastore client: reading a range again", "key", rg.Key, "offset", rg.Offset, "length", rg.Length, "attempt", attempt, "err", fail)
		if err := c.backoff(ctx, attempt, 0); err != nil {
			return nil, fail
		}
	}
}

// errRangeBroken marks a ranged read whose body broke off or had the
// wrong length: worth reading again.
var errRangeBroken = errors.New("client: ranged read broke off")

func (c *Client) readRangeOnce(ctx context.Context, rg manifests.Segment, grant string) ([]byte, error) {
	rc, err := c.readBlob(ctx, rg.Key, int64(rg.Offset), int64(rg.Length), grant)
	if err != nil {
		return nil, fmt.Errorf("client: reading %s@%d: %w", rg.Key, rg.Offset, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(rg.Length)+1))
	if err != nil {
		return nil, fmt.Errorf("client: reading %s@%d: %w: %w", rg.Key, rg.Offset, errRangeBroken, err)
	}
	if uint64(len(b)) != rg.Length {
		return nil, fmt.Errorf("client: %s@%d: %w: read %d bytes of a %d-byte range", rg.Key, rg.Offset, errRangeBroken, len(b), rg.Length)
	}
	return b, nil
}

// readBlob is ReadBlob with grant, the signed query (expires, sig) of a
// restore plan that admits the read without a token ("" for none).
func (c *Client) readBlob(ctx context.Context, key string, offset, length int64, grant string) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("client: ReadBlob: negative offset %d", offset)
	}
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if length >= 0 {
		q.Set("length", strconv.FormatInt(length, 10))
	}
	if grant != "" {
		g, err := url.ParseQuery(grant)
		if err != nil {
			return nil, fmt.Errorf("client: ReadBlob %s: malformed read grant", key)
		}
		for k, vs := range g {
			q[k] = vs
		}
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	path := "/v1/objects/" + strings.Join(segs, "/")
	res, err := c.do(ctx, &request{method: http.MethodGet, path: path, query: q, class: classObjectGet, stream: true}, nil)
	if err != nil {
		return nil, err
	}
	return &countingBody{ReadCloser: res.resp.Body, c: c}, nil
}

type countingBody struct {
	io.ReadCloser
	c *Client
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.bytesRead.Add(int64(n))
	return n, err
}
