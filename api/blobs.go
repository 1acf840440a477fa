package api

import (
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// uploadsCreate hands out upload slots: the leader chooses unique keys under
// the job's prefix, held as intents with a lease: signed slots
// (fsm/upload_slots.go), which need no Raft entry, or an upload batch
// recorded through Raft (slotSigner says which), and answers where to
// upload (a presigned URL for S3, this API's object endpoint for a local
// store). A repeated request gets new keys; the unused ones expire with
// their lease and are collected. With ?shared=true the answer says what
// the slots share once (wire.Uploads.Share).
func (s *Server) uploadsCreate(r *http.Request) (any, uint64, error) {
	job, err := pathID(r, "job")
	if err != nil {
		return nil, 0, err
	}
	shared, err := queryBool(r, "shared")
	if err != nil {
		return nil, 0, err
	}
	var b wire.UploadsRequest
	if err := decodeBody(r, &b, false); err != nil {
		return nil, 0, err
	}
	if b.Count == 0 {
		b.Count = 1
	}
	if b.Count < 0 || b.Count > wire.MaxIntents {
		return nil, 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, "count", "between 1 and %d uploads per request", wire.MaxIntents)
	}
	if s.cfg.Auth {
		// Upload URLs to this API are signed (auth.go): fail before any
		// intent is created while the signing key is not set yet.
		if key, err := s.fsm.URLKey(); err != nil || key == nil {
			return nil, 0, errNoURLKey
		}
	}
	now := s.now()
	p := fsm.IntentCreate{Job: job, Generation: b.Generation, Task: b.Task, LeaseUntil: now.Add(s.cfg.UploadLease).UTC(),
		Batch: blobstore.NewBatchID(now), Count: b.Count}
	if err := p.Validate(); err != nil {
		return nil, 0, err
	}
	signer, index, err := s.slotSigner(&p)
	if err != nil {
		return nil, index, err
	}
	var signedLease time.Time
	if signer != nil {
		signedLease = p.LeaseUntil
	}
	if err := s.quotas.admitIntents(job, b.Count, now, signedLease); err != nil {
		return nil, 0, err
	}
	var keys []string
	if signer != nil {
		keys = signer.Keys(p.Job, p.Task, p.Generation, p.LeaseUntil, uint16(rand.Uint32()), p.Count)
		s.metrics.uploadSlots.WithLabelValues("signed").Add(float64(len(keys)))
	} else {
		if _, index, err = s.node.Propose(r.Context(), fsm.CmdIntentCreate, &p); err != nil {
			return nil, index, err
		}
		keys = p.UploadKeys()
		s.metrics.uploadSlots.WithLabelValues("recorded").Add(float64(len(keys)))
	}
	out := make([]wire.Upload, 0, len(keys))
	for _, key := range keys {
		u := wire.Upload{Key: key, Method: http.MethodPut, ExpiresAt: p.LeaseUntil}
		url, hdr, err := s.store.PresignPut(r.Context(), key, s.cfg.UploadLease)
		switch {
		case err == nil:
			u.URL, u.Header = url, hdr
		case errors.Is(err, blobstore.ErrPresignUnsupported):
			u.URL = s.cfg.HTTPScheme() + "://" + s.cfg.HTTPAdvertiseAddr() + "/v1/objects/" + key
			if s.cfg.Auth {
				// Scoped to this key and method, valid for the lease.
				q, err := s.signObject(http.MethodPut, key, p.LeaseUntil)
				if err != nil {
					return nil, index, err
				}
				u.URL += "?" + q.Encode()
			}
		default:
			return nil, index, storeError(err)
		}
		out = append(out, u)
	}
	ans := wire.Uploads{LeaseUntil: p.LeaseUntil, Uploads: out}
	if shared {
		if sh, ok := ans.Share(); ok {
			return sh, index, nil
		}
	}
	return ans, index, nil
}

// slotSigner returns the signer of the upload slots p asks for when they
// are to be signed slots (fsm/upload_slots.go), handed out with no Raft
// entry, and nil where they must be recorded instead: while the cluster
// has no slot key yet, and when the orphan sweep is off (it is what
// deletes the upload of a signed slot that no ack committed). The job and
// the attempt are checked on the applied state (the ack checks them
// again), and p's lease is made unique to the request.
func (s *Server) slotSigner(p *fsm.IntentCreate) (*fsm.SlotSigner, uint64, error) {
	if s.cfg.GCOrphanEvery <= 0 {
		return nil, 0, nil
	}
	key, err := s.fsm.SlotKey()
	if err != nil || key == nil {
		return nil, 0, err
	}
	index, err := s.fsm.CheckUploadSlots(p.Job, p.Generation)
	if err != nil {
		return nil, index, err
	}
	p.LeaseUntil = s.uniqueLease(p.LeaseUntil)
	signer := fsm.NewSlotSigner(key)
	probe := signer.Keys(p.Job, p.Task, p.Generation, p.LeaseUntil, 0, 1)[0]
	if err := manifests.ValidateKey(probe); err != nil {
		return nil, index, apiErr(http.StatusBadRequest, wire.CodeInvalid, "task", "%v", err)
	}
	return signer, index, nil
}

// uniqueLease returns lease, or a nanosecond after the last lease this
// member gave, whichever is later: with the random nonce, two requests
// never get the same keys.
func (s *Server) uniqueLease(lease time.Time) time.Time {
	for {
		last := s.lastLease.Load()
		n := max(lease.UnixNano(), last+1)
		if s.lastLease.CompareAndSwap(last, n) {
			return time.Unix(0, n).UTC()
		}
	}
}

func pathKey(r *http.Request) (string, error) {
	key := mux.Vars(r)["key"]
	if err := blobstore.ValidateKey(key); err != nil {
		return "", apiErr(http.StatusBadRequest, wire.CodeInvalid, "key", "%v", err)
	}
	return key, nil
}

// objectPut stores an upload through the metastore (the local blob store's
// upload endpoint): only for a key held by a live intent.
func (s *Server) objectPut(r *http.Request) (any, uint64, error) {
	key, err := pathKey(r)
	if err != nil {
		return nil, 0, err
	}
	if r.ContentLength < 0 {
		return nil, 0, apiErr(http.StatusLengthRequired, wire.CodeInvalid, "Content-Length", "an upload needs a Content-Length")
	}
	if r.ContentLength > s.cfg.MaxBlobBytes {
		return nil, 0, apiErr(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "", "blob of %d bytes is larger than %d", r.ContentLength, s.cfg.MaxBlobBytes)
	}
	b, idx, err := s.fsm.Blob(key)
	if err != nil {
		return nil, idx, err
	}
	if b.State != wire.BlobIntent || (b.LeaseUntil != nil && s.now().After(*b.LeaseUntil)) {
		return nil, idx, apiErr(http.StatusConflict, wire.CodeConflict, "key", "blob %q is %s: uploads go to keys held by a live upload intent", key, b.State)
	}
	if b.Generation != 0 {
		// A slot of a superseded attempt can never be committed: its
		// worker keeps no write access.
		if j, _, err := s.fsm.Job(b.Job); err == nil && j.Generation > b.Generation {
			return nil, idx, apiErr(http.StatusConflict, wire.CodeFenced, "key", "blob %q is an upload slot of attempt generation %d, superseded by generation %d", key, b.Generation, j.Generation)
		}
	}
	body := &clientBody{Reader: r.Body}
	if err := s.store.Put(r.Context(), key, body, r.ContentLength); err != nil {
		if errors.Is(body.err, io.ErrUnexpectedEOF) {
			// The client's fault, not the store's.
			return nil, idx, apiErr(http.StatusBadRequest, wire.CodeInvalid, "Content-Length",
				"the upload's body ended after %d of the %d bytes its Content-Length declares", body.n, r.ContentLength)
		}
		return nil, idx, storeError(err)
	}
	return wire.ObjectPut{Key: key, Size: r.ContentLength}, idx, nil
}

// clientBody counts what an upload's body delivered and keeps the error
// that ended it, other than its end.
type clientBody struct {
	io.Reader
	n   int64
	err error
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.n += int64(n)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// objectGet streams a range of a live blob: ?offset=N&length=M.
func (s *Server) objectGet(w http.ResponseWriter, r *http.Request) {
	key, err := pathKey(r)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	offset, err := queryUint(r, "offset")
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	length := int64(-1)
	if raw := r.URL.Query().Get("length"); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 {
			writeError(w, apiErr(http.StatusBadRequest, wire.CodeInvalid, "length", "%q is not a non-negative integer", raw))
			return
		}
		length = n
	}
	b, idx, err := s.fsm.Blob(key)
	if err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if b.State != wire.BlobLive {
		writeError(w, apiErr(http.StatusConflict, wire.CodeConflict, "key", "blob %q is %s", key, b.State))
		return
	}
	rc, err := s.store.Get(r.Context(), key, int64(offset), length)
	if err != nil {
		writeError(w, toAPIError(storeError(err)))
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(HeaderIndex, strconv.FormatUint(idx, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
}

func storeError(err error) error {
	switch {
	case errors.Is(err, blobstore.ErrNotFound):
		return apiErr(http.StatusNotFound, wire.CodeNotFound, "key", "%v", err)
	case errors.Is(err, blobstore.ErrInvalidKey):
		return apiErr(http.StatusBadRequest, wire.CodeInvalid, "key", "%v", err)
	case errors.Is(err, blobstore.ErrInvalidRange):
		return apiErr(http.StatusRequestedRangeNotSatisfiable, wire.CodeInvalid, "offset", "%v", err)
	case errors.Is(err, blobstore.ErrSizeMismatch):
		return apiErr(http.StatusBadRequest, wire.CodeInvalid, "Content-Length", "%v", err)
	}
	var mbe *http.MaxBytesError
	var ae *Error // the body's reader refused it (limits.go)
	if errors.As(err, &mbe) || errors.As(err, &ae) {
		return err
	}
	return &Error{Status: http.StatusBadGateway, Code: wire.CodeUnavailable, Retryable: true, Message: "object store: " + err.Error()}
}

func (s *Server) blobGet(r *http.Request) (any, uint64, error) {
	key, err := pathKey(r)
	if err != nil {
		return nil, 0, err
	}
	return answer(s.fsm.Blob(key))
}

func (s *Server) blobStats(_ *http.Request) (any, uint64, error) {
	st, idx, err := s.fsm.BlobStats()
	if err != nil {
		return nil, idx, err
	}
	return wire.BlobStatsAnswer{Blobs: st, Store: s.store.String()}, idx, nil
}

// fsck recounts every reference count from the manifest records.
func (s *Server) fsck(_ *http.Request) (any, uint64, error) {
	rep, err := s.fsm.Fsck()
	if err != nil {
		return nil, 0, err
	}
	return wire.FsckAnswer{OK: rep.OK(), Report: *rep}, rep.Index, nil
}

func (s *Server) manifestGet(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	m, idx, err := s.fsm.Manifest(t.Job, t.Epoch, t.Task)
	if err != nil {
		return nil, idx, err
	}
	return wire.ManifestAnswer{Bytes: m.Bytes(), Epoch: t.Epoch, Job: t.Job, Manifest: m, Task: t.Task}, idx, nil
}

// errNoGC answers the collector's routes on a member built without one.
var errNoGC = &Error{Status: http.StatusNotImplemented, Code: wire.CodeUnavailable, Message: "this member runs no garbage collector"}

func (s *Server) gcStatus(_ *http.Request) (any, uint64, error) {
	if s.gc == nil {
		return nil, 0, errNoGC
	}
	return s.gc.Status(), s.fsm.AppliedIndex(), nil
}

// gcRun runs one collection cycle now: ?dry_run=true reports what it would
// delete and changes nothing; ?orphans=true includes the orphan sweep.
func (s *Server) gcRun(r *http.Request) (any, uint64, error) {
	if s.gc == nil {
		return nil, 0, errNoGC
	}
	opts := gc.RunOptions{}
	for name, dst := range map[string]*bool{"dry_run": &opts.DryRun, "orphans": &opts.Orphans} {
		if raw := r.URL.Query().Get(name); raw != "" {
			v, err := strconv.ParseBool(raw)
			if err != nil {
				return nil, 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, name, "%q is not true or false", raw)
			}
			*dst = v
		}
	}
	rep, err := s.gc.RunOnce(r.Context(), opts)
	if err != nil {
		return nil, 0, err
	}
	return rep, s.fsm.AppliedIndex(), nil
}

// jobVerify checks with HEAD requests that every blob referenced by the
// job's retained and pinned checkpoints exists: a proof that they restore.
func (s *Server) jobVerify(r *http.Request) (any, uint64, error) {
	job, err := pathID(r, "job")
	if err != nil {
		return nil, 0, err
	}
	if s.gc == nil {
		return nil, 0, errNoGC
	}
	rep, err := s.gc.Verify(r.Context(), job)
	if err != nil {
		return nil, 0, err
	}
	return rep, s.fsm.AppliedIndex(), nil
}

// snapshotSave streams a backup of the whole replicated state: one JSON
// line (index, term, size, SHA-256), then the snapshot, with its
// Content-Length (the snapshot is spooled and hashed before the first
// byte is sent), so a client can tell a cut-short download.
func (s *Server) snapshotSave(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="metastore.backup"`)
	sized := func(total int64) { w.Header().Set("Content-Length", strconv.FormatInt(total, 10)) }
	if _, err := s.node.WriteBackup(r.Context(), w, sized); err != nil {
		// Nothing is written before the snapshot is taken and open, so an
		// error here is still a clean JSON answer unless the copy failed.
		if ww, ok := w.(interface{ Written() bool }); !ok || !ww.Written() {
			ae := toAPIError(err)
			if ae.Code == wire.CodeOutcomeUnknown {
				// Nothing is written by a backup: the snapshot simply failed.
				ae = &Error{Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable, Retryable: true, Message: err.Error()}
			}
			writeError(w, ae)
		}
		s.logger.Warn("backup failed", "err", err)
	}
}

// snapshotRestore replaces the whole replicated state with a backup, after
// checking it against its hash.
func (s *Server) snapshotRestore(r *http.Request) (any, uint64, error) {
	info, err := s.node.RestoreBackup(r.Context(), r.Body)
	if err != nil {
		return nil, 0, err
	}
	return wire.SnapshotRestored{Restored: wireBackupInfo(*info)}, s.fsm.AppliedIndex(), nil
}
