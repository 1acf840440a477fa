package nemesis

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/faultpoint"
	"github.com/metastore/metastore/jepsen/checker"
	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/lossyfs"
	"github.com/metastore/metastore/jepsen/s3proxy"
)

// marker writes one checkpoint of job smoke (an epoch and its one ack)
// and returns the ack's content hash.
func marker(ctx context.Context, c *cluster.Cluster, epoch int) (string, error) {
	if _, err := c.Send(ctx, "POST", "/v1/jobs/smoke/epochs", map[string]any{"generation": 1, "epoch": epoch}, nil); err != nil {
		return "", err
	}
	var ack struct {
		Ack struct {
			ContentHash string `json:"content_hash"`
		} `json:"ack"`
	}
	_, err := c.Send(ctx, "PUT", fmt.Sprintf("/v1/jobs/smoke/epochs/%d/acks/t1", epoch), map[string]any{"generation": 1,
		"payloads": map[string][]byte{"state": []byte(fmt.Sprintf("epoch %d", epoch))}}, &ack)
	return ack.Ack.ContentHash, err
}

// s3Traffic makes the object store busy while an S3 fault holds: uploads
// (PUT through the proxy), garbage and GC cycles (DeleteObjects), verify
// (HEAD), reads of a live blob (GET).
func s3Traffic(ctx context.Context, c *cluster.Cluster) {
	for ctx.Err() == nil {
		job, _, live, err := MakeGarbage(ctx, c)
		if err == nil {
			_, _ = c.Send(ctx, "GET", "/v1/jobs/"+job+"/verify", nil, nil)
		}
		if l, err := c.Leader(ctx); err == nil {
			_, _ = c.Do(ctx, l, "POST", "/v1/gc/run", nil)
			if live != "" {
				_, _ = c.Do(ctx, l, "GET", "/v1/objects/"+live, nil)
			}
		}
	}
}

// TestSmokeEveryFault starts a cluster, writes through the API, runs every
// fault of the Catalog once (health check before, inject, hold, heal,
// health check after: one leader, all ready, all voters, same state hash
// at the same index), writes a checkpoint after each, and at the end reads
// every acknowledged checkpoint back.
func TestSmokeEveryFault(t *testing.T) {
	start := time.Now()
	// Lossy disks where they can be mounted, for the power-loss and disk
	// faults; without them those faults are skipped.
	lossy := lossyfs.Supported() == nil
	c := cluster.StartT(t, cluster.Options{LossyDisk: lossy})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	if _, err := c.Send(ctx, "PUT", "/v1/jobs/smoke", map[string]any{"config": map[string]any{"retained": 100, "ack_timeout": "10m"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, "POST", "/v1/jobs/smoke/attempts", map[string]any{"attempt_id": "a1",
		"tasks": []map[string]any{{"id": "t1", "capabilities": []string{"state"}}, {"id": "m1", "capabilities": []string{}}}}, nil); err != nil {
		t.Fatal(err)
	}
	acked := map[int]string{}
	epoch := 0
	write := func() {
		t.Helper()
		epoch++
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		h, err := marker(wctx, c, epoch)
		if err != nil {
			t.Fatalf("write epoch %d: %v", epoch, err)
		}
		acked[epoch] = h
	}
	write()

	// Beyond the catalog: the leader's collector paused between a mark and
	// the delete while the hold lasts.
	pausePoint := ArmPoint(faultpoint.GCAfterMark, Leader, faultpoint.Arm{Action: faultpoint.Pause})
	faults := append(Catalog(), pausePoint)
	var log []string
	r := &Runner{
		Cluster: c,
		Hold:    1500 * time.Millisecond,
		Logf:    t.Logf,
		During: func(ctx context.Context, f Fault) {
			switch {
			case strings.HasPrefix(f.Name(), "s3-"):
				s3Traffic(ctx, c)
			case f == pausePoint:
				// Garbage, then GC cycles until the leader's collector
				// waits at the point.
				leader, err := c.Leader(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if _, _, _, err := MakeGarbage(ctx, c); err != nil {
					t.Error(err)
					return
				}
				go func() {
					for ctx.Err() == nil {
						rctx, cancel := context.WithTimeout(ctx, time.Second)
						_, _ = c.Do(rctx, leader, "POST", "/v1/gc/run", nil)
						cancel()
					}
				}()
				if _, err := leader.Faults().Wait(ctx, faultpoint.GCAfterMark, 0, 1, 20*time.Second); err != nil {
					t.Errorf("the leader's collector never paused at %s: %v", faultpoint.GCAfterMark, err)
				}
			}
		},
		OnEvent: func(e Event) {
			log = append(log, fmt.Sprintf("%s %s %s", e.Time.Format("15:04:05.000"), e.Fault, e.Phase))
		},
	}
	defer func() {
		if t.Failed() {
			t.Logf("nemesis events:\n%s", strings.Join(log, "\n"))
		}
	}()
	var panics []*regexp.Regexp
	for _, f := range faults {
		if pe, ok := f.(PanicExpecter); ok {
			panics = append(panics, pe.ExpectedPanics()...)
		}
	}
	for _, f := range faults {
		t.Run(f.Name(), func(t *testing.T) {
			if dn, ok := f.(DiskNeeder); ok && dn.NeedsLossyDisk() && !lossy {
				t.Skipf("needs lossy disks: %v", lossyfs.Supported())
			}
			// S3 faults hold long enough for garbage to pass the GC
			// grace period, so that deletes meet them too.
			r.Hold = 1500 * time.Millisecond
			if strings.HasPrefix(f.Name(), "s3-") || f == pausePoint {
				r.Hold = c.Options().GCGrace + 3*time.Second
			}
			fstart := time.Now()
			res := r.Run(ctx, f)
			t.Logf("%s: %s (%s, healthy %s after heal)", f.Name(), res.Detail, time.Since(fstart).Round(time.Millisecond), res.HealthyAfter.Round(time.Millisecond))
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if sf, ok := f.(*s3Fault); ok && sf.Hits() == 0 {
				t.Errorf("%s hit no request", f.Name())
			}
		})
		write()
	}

	// Every acknowledged checkpoint is there, on every member (stale reads
	// from each after convergence), and the members agree.
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Serving() {
		for e, h := range acked {
			var ep struct {
				State string `json:"state"`
				Acks  []struct {
					Task        string `json:"task"`
					ContentHash string `json:"content_hash"`
				} `json:"acks"`
			}
			if err := c.Get(ctx, m, fmt.Sprintf("/v1/jobs/smoke/epochs/%d?consistency=stale", e), &ep); err != nil {
				t.Fatalf("%s epoch %d: %v", m.ID, e, err)
			}
			if ep.State != "completed" || len(ep.Acks) != 1 || ep.Acks[0].ContentHash != h {
				raw, _ := json.Marshal(ep)
				t.Fatalf("%s epoch %d: %s, acknowledged hash %s", m.ID, e, raw, h)
			}
		}
	}
	for _, m := range c.Members() {
		if p := checker.ScanLog(m.LogSince(0), panics...); len(p) > 0 {
			t.Errorf("problems in the log of %s: %v", m.ID, p)
		}
	}
	for _, e := range c.UnexpectedExits() {
		// 137: SIGKILL; 2: a panic on an injected I/O error (excused
		// above only if its line matched).
		if e.Code != 137 && e.Code != 2 {
			t.Errorf("unexpected exit of %s: %s", e.Member, e.Status)
		}
	}
	faulted := 0
	for _, req := range c.S3.Requests() {
		if req.Fault != "" {
			faulted++
		}
	}
	t.Logf("%d faults, %d checkpoints acknowledged and read back; S3 proxy: %d requests, %d faulted; total %s",
		len(faults), len(acked), len(c.S3.Requests()), faulted, time.Since(start).Round(time.Second))
	var ops = map[s3proxy.Op]int{}
	for _, req := range c.S3.Requests() {
		ops[req.Op]++
	}
	t.Logf("S3 requests by operation: %v", ops)
	byFault := map[string]int{}
	for _, req := range c.S3.Requests() {
		if req.Fault != "" {
			byFault[req.Fault]++
		}
	}
	t.Logf("S3 requests by fault: %v", byFault)
}
