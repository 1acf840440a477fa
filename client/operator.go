package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/metastore/metastore/wire"
)

// Operator calls: membership, leadership, tokens, backups, garbage
// collection and checks. With --auth they need an operator token
// (Config.Token), except Members, which any token may call.

// Membership is the Raft membership as a member reports it.
type Membership = wire.Membership

// Members lists the members of the cluster and the leader, as the member
// the client talks to knows them.
func (c *Client) Members(ctx context.Context) (*Membership, error) {
	var out Membership
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/members", class: classRead, local: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AddMember adds a voting member with its Raft and HTTP addresses (as the
// other members and clients reach it) and returns the membership after it.
// Adding a member that is already a voter at the same addresses changes
// nothing.
func (c *Client) AddMember(ctx context.Context, id, raftAddr, httpAddr string) ([]wire.MemberStatus, error) {
	var out wire.MembershipChange
	body := wire.MemberRequest{ID: id, RaftAddr: raftAddr, HTTPAddr: httpAddr}
	if err := c.mutate(ctx, http.MethodPost, "/v1/members", body, &out); err != nil {
		return nil, err
	}
	return out.Members, nil
}

// RemoveMember removes a member and returns the membership after it.
func (c *Client) RemoveMember(ctx context.Context, id string) ([]wire.MemberStatus, error) {
	var out wire.MembershipChange
	if err := c.mutate(ctx, http.MethodDelete, "/v1/members/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return out.Members, nil
}

// LeaderChange is the answer of TransferLeadership.
type LeaderChange = wire.LeaderTransfer

// TransferLeadership hands leadership from the leader to the most
// up-to-date other voter. A cluster with no other voter answers
// ErrConflict.
func (c *Client) TransferLeadership(ctx context.Context) (*LeaderChange, error) {
	var out LeaderChange
	if err := c.mutate(ctx, http.MethodPost, "/v1/leader/transfer", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TokenRequest describes a token to create: Role operator, or worker with
// Job or JobPrefix.
type TokenRequest = wire.TokenRequest

// Token is an API token as the API shows it; Secret is set only in the
// answer of CreateToken, the one time it is shown.
type Token = wire.Token

// CreateToken creates a token and returns it with its secret. It is not
// repeated when its outcome is unknown (a token created twice is two
// tokens): such a failure is a *RetryError with Unknown set, and Tokens
// shows whether it was created.
func (c *Client) CreateToken(ctx context.Context, req TokenRequest) (*Token, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("metastore: POST /v1/tokens: encoding the request: %w", err)
	}
	var out Token
	if _, err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/tokens", body: raw, class: classMutation, once: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Tokens lists the tokens (never their secrets).
func (c *Client) Tokens(ctx context.Context) ([]Token, error) {
	var out wire.TokenList
	if err := c.get(ctx, "/v1/tokens", nil, &out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

// RevokeToken revokes the token with the accessor and returns it. force
// allows revoking the last operator token.
func (c *Client) RevokeToken(ctx context.Context, accessor string, force bool) (*Token, error) {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	var out wire.TokenRevoked
	if _, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/tokens/" + url.PathEscape(accessor), query: q, class: classMutation}, &out); err != nil {
		return nil, err
	}
	return &out.Revoked, nil
}

// GCStatus returns the garbage collector's status on the leader.
func (c *Client) GCStatus(ctx context.Context) (*wire.GCStatus, error) {
	var out wire.GCStatus
	if err := c.get(ctx, "/v1/gc", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunGC runs one collection cycle now on the leader and returns its report
// (opts.DryRun: only what it would do).
func (c *Client) RunGC(ctx context.Context, opts wire.GCRunOptions) (*wire.GCReport, error) {
	q := url.Values{}
	if opts.DryRun {
		q.Set("dry_run", "true")
	}
	if opts.Orphans {
		q.Set("orphans", "true")
	}
	var out wire.GCReport
	// A cycle can take a while: it may wait up to a minute more than a
	// plain request.
	if _, err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/gc/run", query: q, class: classMutation, wait: time.Minute}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Verify checks that the object store holds every blob the job's retained
// and pinned checkpoints reference; the report lists what is missing.
func (c *Client) Verify(ctx context.Context, job string) (*wire.VerifyReport, error) {
	var out wire.VerifyReport
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: jobPath(job) + "/verify", class: classRead, wait: time.Minute}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FsckResult is the answer of Fsck: OK is false on any mismatch.
type FsckResult = wire.FsckAnswer

// Fsck recounts every blob reference count on the leader.
func (c *Client) Fsck(ctx context.Context) (*FsckResult, error) {
	var out FsckResult
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/fsck", class: classRead, wait: time.Minute}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SaveSnapshot streams a backup of the whole replicated state from the
// leader into w and returns the number of bytes written. The backup starts
// with a header line describing it (wire.BackupInfo); w receives it
// unchanged. A transfer cut short is an error (the answer's length is
// known in advance).
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer) (int64, error) {
	body, size, err := c.SnapshotReader(ctx)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	n, err := io.Copy(w, body)
	if err != nil {
		return n, fmt.Errorf("metastore: GET /v1/snapshot: after %d bytes: %w", n, err)
	}
	if size >= 0 && n != size {
		return n, fmt.Errorf("metastore: GET /v1/snapshot: %d of %d bytes", n, size)
	}
	return n, nil
}

// SnapshotReader starts the download of a backup from the leader and
// returns its body, to read and close, and its length (-1 if the member did
// not say). Errors before the first byte (an API answer, no member
// reachable) come back here; ctx bounds the whole transfer.
func (c *Client) SnapshotReader(ctx context.Context) (io.ReadCloser, int64, error) {
	res, err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/snapshot", class: classRead, stream: true}, nil)
	if err != nil {
		return nil, 0, err
	}
	return res.resp.Body, res.resp.ContentLength, nil
}

// RestoreSnapshot replaces the cluster's whole state with the backup read
// from r (size bytes, as SaveSnapshot wrote it) and returns what was
// restored. It is sent once, to the endpoint the client prefers (a
// follower forwards it to the leader), and never repeated: on an error
// other than an API answer, check with Status whether it took effect.
func (c *Client) RestoreSnapshot(ctx context.Context, r io.Reader, size int64) (*wire.BackupInfo, error) {
	if size <= 0 {
		return nil, fmt.Errorf("client: RestoreSnapshot: size %d", size)
	}
	_, base := c.current()
	actx, cancel := context.WithTimeout(ctx, uploadTimeout(c.cfg.RequestTimeout, size))
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPut, base+"/v1/snapshot", io.NopCloser(io.LimitReader(r, size)))
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Accept", "application/json")
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	c.count(classMutation)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metastore: PUT /v1/snapshot: %w", timeoutErr(redactURL(err), actx, ctx))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("metastore: PUT /v1/snapshot: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		ae := decodeError(resp.StatusCode, raw, http.MethodPut, "/v1/snapshot")
		ae.RetryAfter = retryAfter(resp.Header)
		return nil, ae
	}
	if dst, ok := ctx.Value(rawAnswerKey{}).(*[]byte); ok {
		*dst = append((*dst)[:0], raw...)
	}
	var out wire.SnapshotRestored
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("metastore: PUT /v1/snapshot: %w", err)
	}
	return &out.Restored, nil
}
