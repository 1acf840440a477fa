package gc

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/blobstore/blobtest"
	"github.com/metastore/metastore/fsm"
)

// headHookStore is the test store whose Head runs hook first (once per
// key), for what happens while Verify or the observer reads the store.
type headHookStore struct {
	*testStore
	mu   sync.Mutex
	hook func(ctx context.Context, key string) error
}

func (s *headHookStore) Head(ctx context.Context, key string) (blobstore.Info, error) {
	s.mu.Lock()
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, key); err != nil {
			return blobstore.Info{}, err
		}
	}
	return s.testStore.Head(ctx, key)
}

// TestVerifyNeedsLeadership: Verify reads nothing and reports nothing
// without leadership.
func TestVerifyNeedsLeadership(t *testing.T) {
	e := newEnv(t)
	fill(e)
	c := e.collector(baseConfig())
	e.setVerifyErr(errors.New("not the leader"))
	if rep, err := c.Verify(context.Background(), "j"); err == nil {
		t.Fatalf("Verify without leadership: %+v", rep)
	}
}

// TestVerifyCountsAndOrders: with several retained epochs referencing the
// same blobs, Blobs counts distinct keys, References every reference, and
// a lost blob is reported once per epoch that references it, in epoch
// order.
func TestVerifyCountsAndOrders(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 3)
	e.run(w, 1, 5) // epoch 3 materializes: 3, 4 and 5 share its base
	c := e.collector(baseConfig())
	refs, _, err := e.f.ReferencedBlobs("j")
	if err != nil {
		t.Fatal(err)
	}
	distinct := len(e.referenced("j"))
	rep, err := c.Verify(context.Background(), "j")
	if err != nil || !rep.OK() || rep.References != len(refs) || rep.Blobs != distinct || distinct >= len(refs) {
		t.Fatalf("verify %+v %v; want %d references of %d blobs", rep, err, len(refs), distinct)
	}
	base := "j/t0/base-1-3"
	if _, err := e.local.Delete(context.Background(), []string{base}); err != nil {
		t.Fatal(err)
	}
	rep, err = c.Verify(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	var epochs []uint64
	for _, m := range rep.Missing {
		if m.Key != base {
			t.Fatalf("missing %+v", m)
		}
		epochs = append(epochs, m.Epoch)
	}
	if !slices.Equal(epochs, []uint64{3, 4, 5}) {
		t.Fatalf("the lost base reported for epochs %v, want 3, 4, 5 in order", epochs)
	}
}

// TestVerifyHeadErrorsAreNotMissing: a HEAD that fails for another reason
// than a missing object is an error of the report, not a lost blob.
func TestVerifyHeadErrorsAreNotMissing(t *testing.T) {
	e := newEnv(t)
	fill(e)
	keys := e.referenced("j")
	s := &headHookStore{testStore: e.store, hook: func(_ context.Context, k string) error {
		if k == keys[0] {
			return errors.New("503 SlowDown")
		}
		return nil
	}}
	c := e.collectorWith(baseConfig(), s)
	rep, err := c.Verify(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Missing) != 0 || len(rep.Errors) != 1 || rep.Errors[0].Key != keys[0] || !strings.Contains(rep.Errors[0].Error, "SlowDown") {
		t.Fatalf("report %+v, want one error for %s and nothing missing", rep, keys[0])
	}
}

// TestVerifyCanceledReportsNothing: a Verify whose context ends while it
// reads the store returns the context's error, not a report that found
// nothing missing.
func TestVerifyCanceledReportsNothing(t *testing.T) {
	e := newEnv(t)
	fill(e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &headHookStore{testStore: e.store, hook: func(ctx context.Context, _ string) error {
		cancel()
		return ctx.Err()
	}}
	c := e.collectorWith(baseConfig(), s)
	if rep, err := c.Verify(ctx, "j"); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Verify: %+v %v", rep, err)
	}
}

// TestVerifySkipsBlobsReleasedWhileItRuns: blobs the job stops
// referencing while Verify reads the store, one deleted and one
// rewritten meanwhile, are neither missing nor changed: the report is
// judged on the state after the reads.
func TestVerifySkipsBlobsReleasedWhileItRuns(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 1)
	e.run(w, 1, 9) // epoch 9 materializes: its base and its changelog
	keys := e.referenced("j")
	if len(keys) != 2 {
		t.Fatalf("epoch 9 references %v, want a base and a changelog", keys)
	}
	gone, rewritten := keys[0], keys[1]
	var once sync.Once
	released := make(chan struct{})
	s := &headHookStore{testStore: e.store}
	s.hook = func(ctx context.Context, k string) error {
		once.Do(func() {
			// Epochs 10 to 12 release epoch 9's blobs; one object is
			// deleted, the other rewritten with another size.
			e.run(w, 10, 12)
			if _, err := e.local.Delete(ctx, []string{gone}); err != nil {
				t.Error(err)
			}
			e.put(rewritten, 1)
			close(released)
		})
		<-released
		return nil
	}
	c := e.collectorWith(baseConfig(), s)
	rep, err := c.Verify(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Missing) != 0 || len(rep.Changed) != 0 {
		t.Fatalf("blobs released while Verify ran reported: missing %+v, changed %+v", rep.Missing, rep.Changed)
	}
	if b := e.blob(gone); b.Refs != 0 {
		t.Fatalf("scenario: %s still referenced", gone)
	}
}

// TestVerifyReportsEveryMismatch: an object rewritten before it was
// observed is compared with the declared size; one the observer found
// missing and that was put back later still carries that finding.
func TestVerifyReportsEveryMismatch(t *testing.T) {
	e := newEnv(t)
	w := e.startJob("j", 100)
	e.epoch(w, 1, false)
	b := e.epoch(w, 2, false)[0]
	c := e.collector(baseConfig())
	// b is missing when the observer looks, then put back as declared.
	if _, err := e.local.Delete(context.Background(), []string{b}); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Observe(context.Background()); err != nil || rep.Flagged != 1 {
		t.Fatalf("observe: %+v %v", rep, err)
	}
	e.put(b, logSize)
	// d, committed after the observer's pass, is rewritten before any.
	d := e.epoch(w, 3, false)[0]
	e.put(d, logSize+1)
	rep, err := c.Verify(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	why := map[string][]string{}
	for _, ch := range rep.Changed {
		why[ch.Key] = append(why[ch.Key], ch.Mismatches...)
		if ch.Key == d && ch.ObservedSize != nil {
			t.Errorf("%s was never observed, yet has an observed size %d", d, *ch.ObservedSize)
		}
	}
	if len(why[d]) == 0 || !strings.Contains(strings.Join(why[d], "; "), "ack declared 100") {
		t.Errorf("an unobserved blob of another size than declared: %v", why[d])
	}
	if len(why[b]) == 0 || !strings.Contains(strings.Join(why[b], "; "), "missing when the leader observed it") {
		t.Errorf("a blob observed missing, put back since: %v", why[b])
	}
	if len(why) != 2 {
		t.Errorf("changed %v, want %s and %s", why, b, d)
	}
}

// TestVerifyComparesETags: on S3, an object rewritten with the same size
// but other bytes after it was observed is changed: its ETag is not the
// observed one. The store is a cmd/s3server process on loopback.
func TestVerifyComparesETags(t *testing.T) {
	e := newEnv(t)
	endpoint := blobtest.StartS3Server(t, "etag")
	store, err := blobstore.NewS3(context.Background(), blobtest.Config(endpoint, "etag", "ms"))
	if err != nil {
		t.Fatal(err)
	}
	w := e.startJob("j", 1)
	const key = "j/t0/seg"
	ctx := context.Background()
	if err := store.Put(ctx, key, bytes.NewReader(bytes.Repeat([]byte{1}, logSize)), logSize); err != nil {
		t.Fatal(err)
	}
	e.do(fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "t0", Keys: []string{key}, LeaseUntil: t0.Add(time.Hour)})
	if res := e.signedAck(w, 1, key, e.clock.Now()); res.Err != nil {
		t.Fatal(res.Err)
	}
	c := e.collectorWith(baseConfig(), store)
	if rep, err := c.Observe(ctx); err != nil || rep.Observed != 1 || rep.Flagged != 0 {
		t.Fatalf("observe: %+v %v", rep, err)
	}
	observed := e.blob(key).Observed
	if observed == nil || observed.ETag == "" {
		t.Fatalf("observation %+v has no ETag", observed)
	}
	if v, err := c.Verify(ctx, "j"); err != nil || !v.OK() {
		t.Fatalf("verify before the rewrite: %+v %v", v, err)
	}
	if err := store.Put(ctx, key, bytes.NewReader(bytes.Repeat([]byte{2}, logSize)), logSize); err != nil {
		t.Fatal(err)
	}
	v, err := c.Verify(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Changed) != 1 || v.Changed[0].ObservedETag != observed.ETag || v.Changed[0].ETag == observed.ETag ||
		!strings.Contains(strings.Join(v.Changed[0].Mismatches, "; "), "ETag") {
		t.Fatalf("verify after a same-size rewrite: %+v", v.Changed)
	}
}
