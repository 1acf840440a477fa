package nemesis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
)

// loadJob is the job whose config the load writes rewrite.
const loadJob = "nemesis-load"

var loadSeq atomic.Int64

// WriteLoad appends Raft entries until until() reports true or ctx ends:
// concurrency writers each rewrite the config of the job nemesis-load
// with a new ack timeout (every write a distinct command, one log entry),
// sent through the members via (nil: any serving member). It returns the
// number of writes acknowledged. until is polled between writes by one
// writer at a time, at most every 100ms; it must not block for long.
func WriteLoad(ctx context.Context, c *cluster.Cluster, via []*cluster.Member, concurrency int, until func(ctx context.Context) (bool, error)) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		acked   atomic.Int64
		mu      sync.Mutex
		lastChk time.Time
		done    bool
		doneErr error
	)
	check := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return true
		}
		if time.Since(lastChk) < 100*time.Millisecond {
			return false
		}
		lastChk = time.Now()
		uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := until(uctx)
		ucancel()
		if ok || err != nil {
			done, doneErr = true, err
			cancel()
		}
		return done
	}
	for range max(concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !check() && ctx.Err() == nil {
				n := loadSeq.Add(1)
				body := map[string]any{"config": map[string]any{"retained": 1, "ack_timeout": fmt.Sprintf("%ds", 60+n%100000)}}
				wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
				if _, err := c.SendVia(wctx, via, "PUT", "/v1/jobs/"+loadJob, body, nil); err == nil {
					acked.Add(1)
				}
				wcancel()
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if doneErr != nil {
		return int(acked.Load()), doneErr
	}
	if !done {
		return int(acked.Load()), ctx.Err()
	}
	return int(acked.Load()), nil
}
