package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/internal/faultpoint"
	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/s3proxy"
)

var garbageSeq atomic.Int64

// MakeGarbage creates a job of one incremental task whose first blob
// becomes garbage: epoch 1 adds a changelog segment in blob A, epoch 2
// materializes into blob B and truncates the changelog, and with one
// retained checkpoint epoch 1 is subsumed. A is unreferenced from then on
// (a GC candidate once the grace period has passed); B stays live. Both
// are uploaded through the S3 proxy.
func MakeGarbage(ctx context.Context, c *cluster.Cluster) (job, garbage, live string, err error) {
	job = fmt.Sprintf("nemesis-gc-%d-%d", time.Now().UnixNano()%1e9, garbageSeq.Add(1))
	steps := []struct {
		method, path string
		body         any
	}{
		{"PUT", "/v1/jobs/" + job, map[string]any{"config": map[string]any{"retained": 1}}},
		{"POST", "/v1/jobs/" + job + "/attempts", map[string]any{"attempt_id": "a1",
			"tasks": []map[string]any{{"id": "t", "capabilities": []string{"state", "incremental"}}}}},
		{"POST", "/v1/jobs/" + job + "/epochs", map[string]any{"generation": 1, "epoch": 1}},
	}
	for _, s := range steps {
		if _, err := c.Send(ctx, s.method, s.path, s.body, nil); err != nil {
			return "", "", "", err
		}
	}
	if garbage, err = Upload(ctx, c, job, "t", 1, "changelog"); err != nil {
		return "", "", "", err
	}
	ack1 := map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []map[string]any{{"key": garbage, "size": 9}},
		"delta": map[string]any{"add_segments": []map[string]any{{"key": garbage, "offset": 0, "length": 9, "first_seq": 1, "last_seq": 3}}},
	}}
	if _, err := c.Send(ctx, "PUT", "/v1/jobs/"+job+"/epochs/1/acks/t", ack1, nil); err != nil {
		return "", "", "", err
	}
	if _, err := c.Send(ctx, "POST", "/v1/jobs/"+job+"/epochs", map[string]any{"generation": 1, "epoch": 2}, nil); err != nil {
		return "", "", "", err
	}
	if live, err = Upload(ctx, c, job, "t", 1, "base"); err != nil {
		return "", "", "", err
	}
	ack2 := map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []map[string]any{{"key": live, "size": 4}},
		"delta": map[string]any{"materialize": map[string]any{"bases": []map[string]any{{"key": live, "offset": 0, "length": 4}}, "truncate_before": 4}},
	}}
	if _, err := c.Send(ctx, "PUT", "/v1/jobs/"+job+"/epochs/2/acks/t", ack2, nil); err != nil {
		return "", "", "", err
	}
	return job, garbage, live, nil
}

// BlobState returns the state of the blob key (intent, live, deleting,
// gone, ...) as the leader knows it.
func BlobState(ctx context.Context, c *cluster.Cluster, key string) (string, error) {
	var b struct {
		State string `json:"state"`
	}
	_, err := c.Send(ctx, "GET", "/v1/blobs/"+key, nil, &b)
	return b.State, err
}

// WaitBlobGone waits until the blob key is recorded gone and the object
// is no longer in the bucket.
func WaitBlobGone(ctx context.Context, c *cluster.Cluster, bucket blobstore.Store, key string) error {
	var last string
	for {
		state, err := BlobState(ctx, c, key)
		if err == nil {
			last = state
			if state == "gone" {
				_, herr := bucket.Head(ctx, key)
				if errors.Is(herr, blobstore.ErrNotFound) {
					return nil
				}
				return fmt.Errorf("blob %s is recorded gone but still in the bucket (%v)", key, herr)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("blob %s still %q: %w", key, last, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

type gcCrashFault struct {
	victim  *cluster.Member
	armed   []*cluster.Member
	garbage string
	live    string
	marked  []string
	detail  string
}

// GCCrashAfterMark returns the fault that arms a crash at the fault point
// faultpoint.GCAfterMark on every serving member, makes garbage
// (MakeGarbage) and runs GC cycles until the leader marks it deleting and
// dies before deleting it (exit status 137); the survivors are disarmed
// as soon as the victim is down. Heal restarts the crashed member and waits until the new leader has finished
// the deletion: every key of the crashed batch recorded gone and absent
// from the bucket, while the live blob of the same job is still there.
func GCCrashAfterMark() Fault { return &gcCrashFault{} }

func (f *gcCrashFault) Name() string     { return "gc-crash-after-mark" }
func (f *gcCrashFault) Describe() string { return f.detail }

func (f *gcCrashFault) Inject(ctx context.Context, c *cluster.Cluster) error {
	for _, m := range c.Serving() {
		if _, err := m.Faults().Set(ctx, faultpoint.GCAfterMark, faultpoint.Arm{Action: faultpoint.Crash, Count: 1}); err != nil {
			return err
		}
		f.armed = append(f.armed, m)
	}
	var err error
	if _, f.garbage, f.live, err = MakeGarbage(ctx, c); err != nil {
		return fmt.Errorf("make garbage: %w", err)
	}
	f.detail = fmt.Sprintf("armed crash at %s on %v; garbage %s", faultpoint.GCAfterMark, cluster.IDs(f.armed), f.garbage)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for f.victim == nil {
		for _, m := range f.armed {
			if !m.Running() {
				f.victim = m
			}
		}
		if f.victim != nil {
			break
		}
		// Run a cycle now rather than wait for the interval; the
		// request fails when the leader dies in it.
		if l, err := c.Leader(wctx); err == nil {
			rctx, rcancel := context.WithTimeout(wctx, 5*time.Second)
			_, _ = c.Do(rctx, l, "POST", "/v1/gc/run", nil)
			rcancel()
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("no member crashed at %s: %w", faultpoint.GCAfterMark, wctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	// Disarm the survivors now, not at Heal: under a workload's garbage
	// the next leader's collector would reach the point during the hold
	// and crash too. A second crash that raced this still gets restarted
	// by Heal.
	for _, m := range f.armed {
		if m != f.victim && m.Running() {
			if _, err := m.Faults().Set(ctx, faultpoint.GCAfterMark, faultpoint.Arm{Action: faultpoint.Off}); err != nil && m.Running() {
				return fmt.Errorf("disarm %s on %s: %w", faultpoint.GCAfterMark, m.ID, err)
			}
		}
	}
	if err := checkCrash(f.victim, faultpoint.GCAfterMark, &f.detail, 0); err != nil {
		return err
	}
	// The crash line lists the marked keys.
	log := f.victim.LogTail(64 << 10)
	if i := strings.LastIndex(log, "faultpoint: crash at "+faultpoint.GCAfterMark); i >= 0 {
		line, _, _ := strings.Cut(log[i:], "\n")
		if _, keys, ok := strings.Cut(line, ") "); ok {
			f.marked = strings.Fields(keys)
			if strings.HasSuffix(keys, "...") && len(f.marked) > 0 {
				f.marked = f.marked[:len(f.marked)-1] // cut short by the log line's limit
			}
		}
	}
	f.detail = strings.Replace(f.detail, "after 0 writes", fmt.Sprintf("with %d keys marked deleting", len(f.marked)), 1)
	return nil
}

func (f *gcCrashFault) Heal(ctx context.Context, c *cluster.Cluster) error {
	var errs []error
	for _, m := range f.armed {
		if m.Running() {
			if _, err := m.Faults().Set(ctx, faultpoint.GCAfterMark, faultpoint.Arm{Action: faultpoint.Off}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if f.victim == nil {
		return errors.Join(errs...)
	}
	// Restart the victim, and any other armed member that reached the
	// point before Inject disarmed it.
	for _, m := range f.armed {
		if m.Running() {
			continue
		}
		if err := m.Start(ctx); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if m != f.victim {
			f.detail += fmt.Sprintf(", %s crashed too", m.ID)
		}
	}
	f.detail += ", restarted"
	bucket, err := c.Bucket(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	keys := f.marked
	if len(keys) == 0 && f.garbage != "" {
		keys = []string{f.garbage}
	}
	// The crash came before the delete: no delete of a marked key reached
	// the object store before the victim died.
	var died time.Time
	for _, e := range c.UnexpectedExits() {
		if e.Member == f.victim.ID {
			died = e.Time
		}
	}
	prefix := c.S3KeyPrefix()
	for _, r := range c.S3.Requests() {
		if r.Start.After(died) || (r.Op != s3proxy.OpDelete && r.Op != s3proxy.OpDeleteBatch) {
			continue
		}
		for _, k := range append([]string{r.Key}, r.Keys...) {
			if slices.Contains(keys, strings.TrimPrefix(k, prefix)) {
				errs = append(errs, fmt.Errorf("%s deleted marked key %s at %s, before the crash at %s", r.Client, k, r.Start.Format(time.StampMilli), died.Format(time.StampMilli)))
			}
		}
	}
	for _, k := range keys {
		if err := WaitBlobGone(ctx, c, bucket, k); err != nil {
			errs = append(errs, fmt.Errorf("after the crash between mark and delete: %w", err))
		}
	}
	if f.live != "" {
		if _, err := bucket.Head(ctx, f.live); err != nil {
			errs = append(errs, fmt.Errorf("live blob %s: %w", f.live, err))
		}
	}
	if len(errs) == 0 {
		f.detail += fmt.Sprintf("; the new leader finished deleting %d keys", len(keys))
	}
	return errors.Join(errs...)
}
