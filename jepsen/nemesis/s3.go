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

// S3Rules returns a fault that installs arbitrary proxy rules.
func S3Rules(name string, rules ...s3proxy.Rule) Fault { return &s3Fault{name: name, rules: rules} }

func (f *s3Fault) Name() string { return f.name }

func (f *s3Fault) Describe() string {
	var parts []string
	for _, r := range f.rules {
		parts = append(parts, fmt.Sprintf("%s %v prob %.2f", r.Action, r.Ops, r.Prob))
	}
	return fmt.Sprintf("S3 proxy rules [%s]; %d requests hit", strings.Join(parts, "; "), f.hits)
}

// Hits is the number of requests the fault's rules hit.
func (f *s3Fault) Hits() int { return f.hits }

func (f *s3Fault) Inject(ctx context.Context, c *cluster.Cluster) error {
	f.ids = nil
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
	f.hits = 0
	for _, id := range f.ids {
		f.hits += c.S3.Fired(id)
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
