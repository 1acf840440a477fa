package nemesis

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/metastore/metastore/jepsen/cluster"
	"github.com/metastore/metastore/jepsen/s3proxy"
)

// LostReplyKind selects the writes whose replies S3LostReply loses.
type LostReplyKind string

// Lost-reply kinds.
const (
	// LostPut: PutObject (the workers' presigned uploads).
	LostPut LostReplyKind = "put"
	// LostDelete: DeleteObject and DeleteObjects (the garbage collector).
	LostDelete LostReplyKind = "delete"
)

type s3Fault struct {
	name  string
	rules []s3proxy.Rule
	ids   []int
	hits  int
	// from is the proxy's last request before Inject; late and corrupted
	// count, at Heal, the requests forwarded after their client gave up
	// and the answers whose bytes were flipped.
	from            uint64
	late, corrupted int
}

// S3Errors returns the fault that answers a share prob of all object-store
// requests with 503 Service Unavailable, without forwarding them.
func S3Errors(prob float64) Fault {
	return &s3Fault{name: "s3-errors", rules: []s3proxy.Rule{{Name: "s3-errors", Action: s3proxy.ActError, Status: 503, Prob: prob}}}
}

// S3Timeouts returns the fault that holds a share prob of all
// object-store requests for hold and then drops their connections,
// without forwarding them.
func S3Timeouts(hold time.Duration, prob float64) Fault {
	return &s3Fault{name: "s3-timeouts", rules: []s3proxy.Rule{{Name: "s3-timeouts", Action: s3proxy.ActTimeout, Hold: hold, Prob: prob}}}
}

// S3LostReply returns the fault that forwards half of the PUTs (or
// DELETEs, single and batch) to the S3 server, which applies them, and then
// resets the client's connection: the caller cannot know the write
// happened.
func S3LostReply(k LostReplyKind) Fault {
	ops := []s3proxy.Op{s3proxy.OpPut}
	if k == LostDelete {
		ops = []s3proxy.Op{s3proxy.OpDelete, s3proxy.OpDeleteBatch}
	}
	name := "s3-lost-" + string(k)
	return &s3Fault{name: name, rules: []s3proxy.Rule{{Name: name, Ops: ops, Action: s3proxy.ActLoseReply, Prob: 0.5}}}
}

// S3Slow returns the fault that delays a share prob of all object-store
// requests by delay plus a random part of jitter before forwarding them.
func S3Slow(delay, jitter time.Duration, prob float64) Fault {
	return &s3Fault{name: "s3-slow", rules: []s3proxy.Rule{{Name: "s3-slow", Action: s3proxy.ActDelay, Delay: delay, Jitter: jitter, Prob: prob}}}
}

// S3LatePut returns the fault that takes a share prob of the PUTs (the
// workers' presigned uploads), reads each body in full and holds it until
// its client has given up (connection closed; at most maxHold), then
// forwards it: the object lands after the worker saw its upload fail, and
// the worker retries it or abandons the upload slot, whose intent the
// store's orphan sweep collects after its lease. Heal waits until every
// held PUT was forwarded, so the checkers' final listing sees them.
func S3LatePut(maxHold time.Duration, prob float64) Fault {
	return &s3Fault{name: "s3-late-put", rules: []s3proxy.Rule{{Name: "s3-late-put", Ops: []s3proxy.Op{s3proxy.OpPut}, Action: s3proxy.ActLate, Hold: maxHold, Prob: prob}}}
}

// S3CorruptGet returns the fault that forwards GETs and flips 1 to 3
// bytes of the body of a share prob of the successful answers (same
// length): a restore must notice (the CRC32C of each range) and read
// again.
func S3CorruptGet(prob float64) Fault {
	return &s3Fault{name: "s3-corrupt-get", rules: []s3proxy.Rule{{Name: "s3-corrupt-get", Ops: []s3proxy.Op{s3proxy.OpGet}, Action: s3proxy.ActCorrupt, Prob: prob}}}
}

// S3Rules returns a fault that installs arbitrary proxy rules.
func S3Rules(name string, rules ...s3proxy.Rule) Fault { return &s3Fault{name: name, rules: rules} }

func (f *s3Fault) Name() string { return f.name }

func (f *s3Fault) Describe() string {
	var parts []string
	for _, r := range f.rules {
		part := fmt.Sprintf("%s %v prob %.2f", r.Action, r.Ops, r.Prob)
		if r.Action == s3proxy.ActDelay {
			part += fmt.Sprintf(" by %s to %s", r.Delay, r.Delay+r.Jitter)
		}
		parts = append(parts, part)
	}
	d := fmt.Sprintf("S3 proxy rules [%s]; %d requests hit", strings.Join(parts, "; "), f.hits)
	if f.late > 0 {
		d += fmt.Sprintf(", %d forwarded after their client gave up", f.late)
	}
	if f.corrupted > 0 {
		d += fmt.Sprintf(", %d answers corrupted", f.corrupted)
	}
	return d
}

// Hits is the number of requests the fault's rules hit.
func (f *s3Fault) Hits() int { return f.hits }

func (f *s3Fault) Inject(ctx context.Context, c *cluster.Cluster) error {
	f.ids, f.late, f.corrupted = nil, 0, 0
	f.from = c.S3.LastSeq()
	for _, r := range f.rules {
		id, err := c.S3.AddRule(r)
		if err != nil {
			return err
		}
		f.ids = append(f.ids, id)
	}
	return nil
}

func (f *s3Fault) Heal(ctx context.Context, c *cluster.Cluster) error {
	for _, id := range f.ids {
		c.S3.RemoveRule(id)
	}
	// Held requests (ActLate) are still to land: wait for them, so that
	// the fault is over when Heal returns.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for _, id := range f.ids {
		for c.S3.Holding(id) > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %d requests still held: %w", f.name, c.S3.Holding(id), ctx.Err())
			case <-tick.C:
			}
		}
	}
	f.hits = 0
	for _, id := range f.ids {
		f.hits += c.S3.Fired(id)
	}
	for _, r := range c.S3.Since(f.from) {
		if r.Late && r.Forwarded {
			f.late++
		}
		if r.Flipped > 0 {
			f.corrupted++
		}
	}
	return nil
}

// Upload asks the cluster for an upload slot of job's task (generation
// gen) and PUTs body to the presigned URL, through the S3 proxy, retrying
// while the proxy or the store fail. It returns the blob key.
func Upload(ctx context.Context, c *cluster.Cluster, job, task string, gen uint64, body string) (string, error) {
	var ans struct {
		Uploads []struct {
			Key    string      `json:"key"`
			URL    string      `json:"url"`
			Header http.Header `json:"header"`
		} `json:"uploads"`
	}
	if _, err := c.Send(ctx, "POST", "/v1/jobs/"+job+"/uploads", map[string]any{"generation": gen, "task": task, "count": 1}, &ans); err != nil {
		return "", err
	}
	if len(ans.Uploads) != 1 {
		return "", fmt.Errorf("uploads: %d slots", len(ans.Uploads))
	}
	u := ans.Uploads[0]
	var last error
	for range 10 {
		req, err := http.NewRequestWithContext(ctx, "PUT", u.URL, strings.NewReader(body))
		if err != nil {
			return "", err
		}
		for k, vs := range u.Header {
			req.Header[k] = vs
		}
		resp, err := c.HTTPClient().Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return u.Key, nil
			}
			err = fmt.Errorf("PUT %s: %d", u.URL, resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", last
}
