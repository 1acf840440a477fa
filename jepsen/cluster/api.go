package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Status is a member's answer to GET /v1/status.
type Status struct {
	ID                string         `json:"id"`
	State             string         `json:"state"` // leader, follower, candidate, shutdown
	LeaderID          string         `json:"leader_id"`
	LeaderHTTPAddr    string         `json:"leader_http_addr"`
	Term              uint64         `json:"term"`
	CommitIndex       uint64         `json:"commit_index"`
	AppliedIndex      uint64         `json:"applied_index"`
	LastLogIndex      uint64         `json:"last_log_index"`
	LastSnapshotIndex uint64         `json:"last_snapshot_index"`
	Members           []MemberStatus `json:"members"`
}

// MemberStatus is one entry of Status.Members.
type MemberStatus struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Suffrage string `json:"suffrage"` // voter, nonvoter, staging, none
	Leader   bool   `json:"leader"`
}

// Voters returns the ids of the voters in s.
func (s Status) Voters() []string {
	var out []string
	for _, m := range s.Members {
		if m.Suffrage == "voter" {
			out = append(out, m.ID)
		}
	}
	sort.Strings(out)
	return out
}

// StateHash is a member's answer to GET /v1/state/hash.
type StateHash struct {
	ID    string `json:"id"`
	Index uint64 `json:"index"`
	Hash  string `json:"hash"`
}

// APIError is an error answer of the metastore API.
type APIError struct {
	Status    int    `json:"-"`
	Code      string `json:"code"`
	Field     string `json:"field,omitempty"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// Member is the member that answered.
	Member string `json:"-"`
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s answered %d %s: %s", e.Member, e.Status, e.Code, e.Message)
}

// Response is an API answer.
type Response struct {
	Status int
	Body   []byte
	// Index is the X-Metastore-Index header (0 if absent).
	Index uint64
	// Member answered (for a forwarded request, the one asked).
	Member string
}

// Do sends one request to member m: body (if not nil) is sent as JSON. A
// transport failure is an error; any HTTP answer, error statuses included,
// is a Response.
func (c *Cluster) Do(ctx context.Context, m *Member, method, path string, body any) (*Response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, m.URL(path), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	idx, _ := strconv.ParseUint(resp.Header.Get("X-Metastore-Index"), 10, 64)
	return &Response{Status: resp.StatusCode, Body: raw, Index: idx, Member: m.ID}, nil
}

// Err returns the API error of a non-2xx answer, nil for a 2xx.
func (r *Response) Err() error {
	if r.Status >= 200 && r.Status < 300 {
		return nil
	}
	var e struct {
		Error APIError `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	e.Error.Status, e.Error.Member = r.Status, r.Member
	if e.Error.Code == "" {
		e.Error.Message = strings.TrimSpace(string(r.Body))
	}
	return &e.Error
}

// Get sends GET path to m and decodes a 2xx answer into out.
func (c *Cluster) Get(ctx context.Context, m *Member, path string, out any) error {
	r, err := c.Do(ctx, m, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if err := r.Err(); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(r.Body, out)
}

// Retryable reports whether a request that failed with err may be sent
// again unchanged: the member could not be reached or answered a 503 (or
// 502/504) the API marks retryable. Every metastore mutation is idempotent
// by content, so repeating one whose outcome was unknown is safe.
func Retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadGateway, http.StatusGatewayTimeout:
			return true
		case http.StatusServiceUnavailable:
			return ae.Retryable || ae.Code == ""
		}
		return false
	}
	return err != nil
}

// Send sends a request to a random serving member and repeats it (against
// random serving members, with backoff) while it fails retryably, until
// ctx ends. It decodes a 2xx answer into out (if not nil) and returns the
// final response. A non-retryable API error ends it at once.
//
// Send is for setting up and driving faults, not for recording histories:
// a workload must record each attempt and its outcome itself.
func (c *Cluster) Send(ctx context.Context, method, path string, body, out any) (*Response, error) {
	return c.SendVia(ctx, nil, method, path, body, out)
}

// SendVia is Send through the members ms only (those of them serving);
// nil means every serving member. Sending through the majority side of a
// partition avoids members that cannot reach the leader.
func (c *Cluster) SendVia(ctx context.Context, ms []*Member, method, path string, body, out any) (*Response, error) {
	backoff := 20 * time.Millisecond
	var last error
	for {
		serving := c.Serving()
		if ms != nil {
			serving = slices.DeleteFunc(serving, func(m *Member) bool { return !slices.Contains(ms, m) })
		}
		if len(serving) > 0 {
			m := serving[rand.IntN(len(serving))]
			r, err := c.Do(ctx, m, method, path, body)
			if err == nil {
				err = r.Err()
			}
			if err == nil {
				if out != nil {
					if err := json.Unmarshal(r.Body, out); err != nil {
						return r, fmt.Errorf("decode %s %s: %w", method, path, err)
					}
				}
				return r, nil
			}
			if !Retryable(err) {
				return r, err
			}
			last = err
		} else {
			last = errors.New("no member is serving")
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s %s: %w (last error: %v)", method, path, ctx.Err(), last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// Status returns m's /v1/status.
func (c *Cluster) Status(ctx context.Context, m *Member) (Status, error) {
	var st Status
	err := c.Get(ctx, m, "/v1/status", &st)
	return st, err
}

// StateHash returns m's /v1/state/hash: the digest of its state at its
// applied index.
func (c *Cluster) StateHash(ctx context.Context, m *Member) (StateHash, error) {
	var h StateHash
	err := c.Get(ctx, m, "/v1/state/hash", &h)
	return h, err
}

// Ready reports m's /readyz: nil when it knows a leader and has applied
// everything it knows committed.
func (c *Cluster) Ready(ctx context.Context, m *Member) error {
	r, err := c.Do(ctx, m, http.MethodGet, "/readyz", nil)
	if err != nil {
		return err
	}
	return r.Err()
}

// Leader waits until every serving member names the same leader, and that
// leader is a serving member that says it leads; it returns the leader.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	var last error
	for {
		m, err := c.leaderOnce(ctx)
		if err == nil {
			return m, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: no agreed leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) leaderOnce(ctx context.Context) (*Member, error) {
	serving := c.Serving()
	if len(serving) == 0 {
		return nil, errors.New("no member is serving")
	}
	names := map[string]bool{}
	var leader *Member
	for _, m := range serving {
		st, err := c.Status(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.ID, err)
		}
		if st.LeaderID == "" {
			return nil, fmt.Errorf("%s knows no leader (%s, term %d)", m.ID, st.State, st.Term)
		}
		names[st.LeaderID] = true
		if st.State == "leader" {
			leader = m
		}
	}
	if len(names) != 1 || leader == nil || !names[leader.ID] {
		var ids []string
		for id := range names {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return nil, fmt.Errorf("serving members name leaders %v", ids)
	}
	return leader, nil
}

// LeaderAmong returns the member of ms that says it is the leader, if
// any, without waiting and without asking the others: during a partition
// the majority side has a leader that the cut-off members do not know.
// With several self-declared leaders (a deposed one that has not noticed
// yet), the one with the highest term wins.
func (c *Cluster) LeaderAmong(ctx context.Context, ms []*Member) (*Member, Status, error) {
	var best *Member
	var bestSt Status
	for _, m := range ms {
		if !m.Serving() {
			continue
		}
		st, err := c.Status(ctx, m)
		if err != nil || st.State != "leader" {
			continue
		}
		if best == nil || st.Term > bestSt.Term {
			best, bestSt = m, st
		}
	}
	if best == nil {
		return nil, Status{}, errors.New("no member of the group is leader")
	}
	return best, bestSt, nil
}

// Followers returns the serving members other than leader.
func (c *Cluster) Followers(leader *Member) []*Member {
	var out []*Member
	for _, m := range c.Serving() {
		if m != leader {
			out = append(out, m)
		}
	}
	return out
}

// WaitHealthy waits until the cluster is healthy: every serving member
// agrees on one serving leader and is ready (/readyz), the voters of the
// leader's configuration are exactly the serving members (a voter that is
// down or paused is not healthy, nor is a member that runs without a vote),
// and all of them report the same state hash at the same applied index. It
// returns the last reason it was not, when ctx ends.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last error
	for {
		last = c.healthyOnce(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: not healthy: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Healthy checks once what WaitHealthy waits for.
func (c *Cluster) Healthy(ctx context.Context) error { return c.healthyOnce(ctx) }

// WaitCaughtUp waits until the cluster is healthy as WaitHealthy says,
// except that the state hashes are not compared: every serving member must
// instead have applied the leader's commit index as of the first check
// (the state hashes of members under load are rarely read at one index;
// the suite compares them once the workload has stopped). It returns the
// last reason it was not, when ctx ends.
func (c *Cluster) WaitCaughtUp(ctx context.Context) error {
	var last error
	var target uint64
	for {
		last = c.caughtUpOnce(ctx, &target)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: not caught up: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) caughtUpOnce(ctx context.Context, target *uint64) error {
	st, err := c.leaderStatus(ctx)
	if err != nil {
		return err
	}
	if *target == 0 {
		*target = st.CommitIndex
	}
	for _, m := range c.Serving() {
		ms, err := c.Status(ctx, m)
		if err != nil {
			return err
		}
		if ms.AppliedIndex < *target {
			return fmt.Errorf("%s applied %d of %d", m.ID, ms.AppliedIndex, *target)
		}
	}
	return nil
}

func (c *Cluster) healthyOnce(ctx context.Context) error {
	if _, err := c.leaderStatus(ctx); err != nil {
		return err
	}
	return c.convergedOnce(ctx, c.Serving())
}

// leaderStatus checks once that every serving member agrees on one
// serving leader and is ready, and that the voters of the leader's
// configuration are exactly the serving members; it returns the leader's
// status.
func (c *Cluster) leaderStatus(ctx context.Context) (Status, error) {
	leader, err := c.leaderOnce(ctx)
	if err != nil {
		return Status{}, err
	}
	st, err := c.Status(ctx, leader)
	if err != nil {
		return Status{}, err
	}
	voters := st.Voters()
	serving := c.Serving()
	for _, v := range voters {
		if m := c.Member(v); m == nil || !m.Serving() {
			return Status{}, fmt.Errorf("voter %s is not serving", v)
		}
	}
	for _, m := range serving {
		if !contains(voters, m.ID) {
			return Status{}, fmt.Errorf("%s is serving but not a voter (voters %v)", m.ID, voters)
		}
		if err := c.Ready(ctx, m); err != nil {
			return Status{}, fmt.Errorf("%s not ready: %w", m.ID, err)
		}
	}
	return st, nil
}

// Converged checks once that ms (default: the serving members) report the
// same state hash at the same applied index.
func (c *Cluster) Converged(ctx context.Context, ms ...*Member) error {
	if len(ms) == 0 {
		ms = c.Serving()
	}
	return c.convergedOnce(ctx, ms)
}

func (c *Cluster) convergedOnce(ctx context.Context, ms []*Member) error {
	var first StateHash
	for i, m := range ms {
		h, err := c.StateHash(ctx, m)
		if err != nil {
			return fmt.Errorf("%s state hash: %w", m.ID, err)
		}
		if i == 0 {
			first = h
			continue
		}
		if h.Index != first.Index || h.Hash != first.Hash {
			return fmt.Errorf("%s at index %d hash %.12s, %s at index %d hash %.12s", m.ID, h.Index, h.Hash, ms[0].ID, first.Index, first.Hash)
		}
	}
	return nil
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
