package mssut

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/node"
)

// memberStatus is a member's answer to GET /v1/status.
type memberStatus = node.Status

// apiError is an error answer of the metastore's HTTP API.
type apiError struct {
	Status    int
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Request   string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.Request, e.Status, e.Code, e.Message)
}

// send makes one request of an operator endpoint of the member at base
// and decodes a JSON answer into out (when not nil). The Go client covers
// the worker's calls; these (status, collector, blobs, snapshots) it does
// not.
func (s *System) send(ctx context.Context, base, method, path string, body io.Reader, size int64, out any, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.ContentLength = size
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("mssut: %s %s%s: %w", method, base, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		ae := &apiError{Status: resp.StatusCode, Request: method + " " + base + path}
		var env struct {
			Error *apiError `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil && env.Error != nil {
			ae.Code, ae.Message, ae.Retryable = env.Error.Code, env.Error.Message, env.Error.Retryable
		} else {
			ae.Message = strings.TrimSpace(string(raw))
		}
		return ae
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if w, ok := out.(io.Writer); ok {
		_, err = io.Copy(w, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("mssut: %s %s%s: decoding the answer: %w", method, base, path, err)
	}
	return nil
}

// status reads a member's own status.
func (s *System) status(ctx context.Context, p *proc) (*memberStatus, error) {
	var st memberStatus
	if err := s.send(ctx, p.url(), http.MethodGet, "/v1/status", nil, 0, &st, defaultStatusRequestTimeout); err != nil {
		return nil, err
	}
	return &st, nil
}

// ready reports whether the member answers /readyz with 200: it knows a
// leader and has applied what is committed.
func (s *System) ready(ctx context.Context, p *proc) bool {
	return s.send(ctx, p.url(), http.MethodGet, "/readyz", nil, 0, nil, defaultStatusRequestTimeout) == nil
}

// onLeader sends a request to the current leader, again to whoever leads
// when the member asked was not (or no longer) the leader or could not be
// reached, until ctx ends. body makes a fresh request body for each
// attempt. The operator requests sent this way are idempotent.
func (s *System) onLeader(ctx context.Context, method, path string, body func() (io.Reader, int64, error), out any, timeout time.Duration) error {
	var last error
	err := sut.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		p, err := s.leader(ctx)
		if err != nil {
			return false, err
		}
		var rd io.Reader
		var size int64
		if body != nil {
			if rd, size, err = body(); err != nil {
				return false, err
			}
		}
		err = s.send(ctx, p.url(), method, path, rd, size, out, timeout)
		if err == nil {
			return true, nil
		}
		last = err
		var ae *apiError
		if errors.As(err, &ae) && !ae.Retryable && ae.Status != http.StatusBadGateway && ae.Status != http.StatusServiceUnavailable {
			return false, err // a definite answer
		}
		return false, nil
	})
	if err != nil && last != nil && !errors.Is(err, last) {
		return fmt.Errorf("%w (last attempt: %v)", err, last)
	}
	return err
}

// staleReads is the transport of the per-member clients: it asks for
// consistency=stale on every API read, so the member answers from its own
// state instead of forwarding to the leader. (The Go client has no
// consistency option.)
type staleReads struct{ base http.RoundTripper }

func (t staleReads) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/v1/") {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	q := r.URL.Query()
	q.Set("consistency", "stale")
	r.URL.RawQuery = q.Encode()
	return t.base.RoundTrip(r)
}

var _ sut.StateSettler = (*System)(nil)

// settleStateMax bounds SettleState's wait: longer than the longest
// commit interval a member accepts (--state-commit-interval-follower, at
// most 10 s).
const settleStateMax = 30 * time.Second

// SettleState waits until every running member's state file has
// committed the Raft index the member had applied when the call began
// (metastore_node_fsm_committed_index against
// metastore_node_fsm_applied_index). A scrape of /metrics reads the
// state (the jobs' gauges), and a read commits the open transaction
// first (fsm/commit.go), so in practice the first scrape makes each
// member write what it applied: a measured window is charged with one
// commit of its writes on every member, whatever the commit intervals.
func (s *System) SettleState(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, settleStateMax)
	defer cancel()
	for _, p := range s.running() {
		applied, err := s.metricOf(ctx, p, "metastore_node_fsm_applied_index")
		if err != nil {
			return err
		}
		for {
			committed, err := s.metricOf(ctx, p, "metastore_node_fsm_committed_index")
			if err != nil {
				return err
			}
			if committed >= applied {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("mssut: member %s: state file committed at index %.0f, applied %.0f: %w", p.id, committed, applied, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// metricSum adds the samples of a Prometheus counter or histogram count
// named name whose labels include every label of want (name="value"
// pairs), over the running members' /metrics.
func (s *System) metricSum(ctx context.Context, name string, want ...string) (float64, error) {
	var total float64
	for _, p := range s.running() {
		v, err := s.metricOf(ctx, p, name, want...)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// metricOf is metricSum for the one member p.
func (s *System) metricOf(ctx context.Context, p *proc, name string, want ...string) (float64, error) {
	var buf strings.Builder
	if err := s.send(ctx, p.url(), http.MethodGet, "/metrics", nil, 0, &buf, defaultStatusRequestTimeout); err != nil {
		return 0, err
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels, value := "", rest
		if strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				continue
			}
			labels, value = rest[1:end], rest[end+1:]
		}
		for _, w := range want {
			if !strings.Contains(","+labels+",", ","+w+",") {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("mssut: metric line %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}
