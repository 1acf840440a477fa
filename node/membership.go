package node

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
)

// AddVoter adds (or confirms) server id at raftAddr as a voter, and records
// its HTTP address. Leader only (else ErrNotLeader). It first writes the
// member record through Raft, so the leader's FSM knows the new member's
// HTTP address before the member takes part, then changes the Raft
// configuration. It is idempotent: for a voter already at raftAddr only the
// member record is brought up to date. If the id is in the configuration at
// another address, or the address belongs to another id, it returns an error
// wrapping ErrMemberConflict: the old server must be removed first.
//
// Invalid arguments are refused before anything is proposed, with the
// state machine's *wire.RuleError (MemberUpsert.Validate). Other errors are
// those of Propose (ErrNotLeader, ErrTryAgain, ErrUnknownOutcome, ...).
func (n *Node) AddVoter(ctx context.Context, id, raftAddr, httpAddr string) error {
	upsert := fsm.MemberUpsert{ID: id, RaftAddr: raftAddr, HTTPAddr: httpAddr}
	if err := upsert.Validate(); err != nil {
		return err
	}
	if err := n.leaderOnly(); err != nil {
		return err
	}
	n.changeMu.Lock()
	defer n.changeMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()

	servers, err := n.configuration()
	if err != nil {
		return mapRaftError(err)
	}
	var existing *raft.Server
	for i, s := range servers {
		switch {
		case string(s.ID) == id && string(s.Address) != raftAddr:
			return fmt.Errorf("%w: server %q is in the cluster at raft address %s, not %s: remove it first", ErrMemberConflict, id, s.Address, raftAddr)
		case string(s.ID) == id:
			existing = &servers[i]
		case string(s.Address) == raftAddr:
			return fmt.Errorf("%w: raft address %s belongs to server %q: remove it first", ErrMemberConflict, raftAddr, s.ID)
		}
	}

	if existing == nil || existing.Suffrage != raft.Voter {
		if err := n.checkQuorumAfter(ctx, servers, &raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(raftAddr), Suffrage: raft.Voter}, ""); err != nil {
			return err
		}
	}

	want := fsm.Member{ID: id, RaftAddr: raftAddr, HTTPAddr: httpAddr}
	if ok, err := n.hasRecord(want); err != nil || !ok {
		if _, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, upsert); err != nil {
			return err
		}
	}
	if existing != nil && existing.Suffrage == raft.Voter {
		return nil
	}
	deadline, _ := ctx.Deadline()
	if err := waitFuture(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, time.Until(deadline))); err != nil {
		return fmt.Errorf("node: add voter %s: %w", id, mapRaftError(err))
	}
	n.log.Info("voter added", "id", id, "raft_addr", raftAddr, "http_addr", httpAddr)
	return nil
}

// RemoveServer removes server id from the Raft configuration, then its
// member record. Leader only (else ErrNotLeader). An id that is neither a
// server nor a member record returns an error wrapping ErrUnknownMember.
// When the leader removes itself, the record goes first (it cannot write
// once it has left) and leadership passes to another voter.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	n.changeMu.Lock()
	defer n.changeMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()

	servers, err := n.configuration()
	if err != nil {
		return mapRaftError(err)
	}
	inConfig := false
	for _, s := range servers {
		if string(s.ID) == id {
			inConfig = true
		}
	}
	members, err := n.fsm.Members()
	if err != nil {
		return fmt.Errorf("node: read members: %w", err)
	}
	hasRecord := false
	for _, m := range members {
		if m.ID == id {
			hasRecord = true
		}
	}
	if !inConfig && !hasRecord {
		return fmt.Errorf("%w: %q", ErrUnknownMember, id)
	}
	if inConfig {
		if err := n.checkQuorumAfter(ctx, servers, nil, id); err != nil {
			return err
		}
	}

	removeRecord := func() error {
		if !hasRecord {
			return nil
		}
		_, _, err := n.Propose(ctx, fsm.CmdMemberRemove, fsm.MemberRemove{ID: id})
		return err
	}
	removeServer := func() error {
		if !inConfig {
			return nil
		}
		deadline, _ := ctx.Deadline()
		if err := waitFuture(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, time.Until(deadline))); err != nil {
			return fmt.Errorf("node: remove server %s: %w", id, mapRaftError(err))
		}
		return nil
	}
	steps := []func() error{removeServer, removeRecord}
	if id == n.cfg.NodeID {
		steps = []func() error{removeRecord, removeServer}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	n.log.Info("server removed", "id", id, "was_in_configuration", inConfig, "had_member_record", hasRecord)
	return nil
}

// quorumProbeTimeout bounds the dial of one voter by checkQuorumAfter.
const quorumProbeTimeout = 2 * time.Second

// checkQuorumAfter is the strict reconfiguration check (etcd's
// --strict-reconfig-check): it refuses, with ErrQuorumAtRisk, a change of
// the configuration servers into one with add as a voter or without the
// server removeID, when the voters of the new configuration that this
// leader can reach would not be a quorum of it. This leader counts as
// reachable; every other voter, the one being added included, is dialled
// on its Raft address (through the TLS stream layer with TLS, so a member
// that is not of the cluster's CA counts as unreachable). A voter added
// before it is started is accepted only while the others still form a
// quorum without it: adding a fourth to three is fine, adding a second to
// one is not.
func (n *Node) checkQuorumAfter(ctx context.Context, servers []raft.Server, add *raft.Server, removeID string) error {
	var voters []raft.Server
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != removeID && (add == nil || s.ID != add.ID) {
			voters = append(voters, s)
		}
	}
	if add != nil {
		voters = append(voters, *add)
	}
	if len(voters) == 0 {
		// Refused here, before any step: Raft would refuse it too, but
		// only after a self-removal has deleted the member's record.
		return fmt.Errorf("%w: removing %s would leave no voter", ErrQuorumAtRisk, removeID)
	}
	probes := make([]error, len(voters))
	var wg sync.WaitGroup
	for i, s := range voters {
		if string(s.ID) == n.cfg.NodeID {
			continue
		}
		wg.Go(func() { probes[i] = n.probeRaft(ctx, string(s.Address)) })
	}
	wg.Wait()
	reachable := 0
	var down []string
	for i, s := range voters {
		if probes[i] == nil {
			reachable++
		} else {
			down = append(down, fmt.Sprintf("%s at %s: %v", s.ID, s.Address, probes[i]))
		}
	}
	quorum := len(voters)/2 + 1
	if reachable >= quorum {
		return nil
	}
	change := "removing " + removeID
	if add != nil {
		change = "adding " + string(add.ID)
	}
	return fmt.Errorf("%w: %s would leave %d voter(s) of which %d can be reached, and a quorum is %d (unreachable: %s); start the member, or repair the unreachable ones, first",
		ErrQuorumAtRisk, change, len(voters), reachable, quorum, strings.Join(down, "; "))
}

// probeRaft dials a member's Raft address, within quorumProbeTimeout, as
// Raft would: through the TLS stream layer when the cluster uses TLS (the
// handshake must succeed), plain TCP otherwise. It sends no Raft message;
// the member's transport sees a connection that closes at once.
func (n *Node) probeRaft(ctx context.Context, addr string) error {
	timeout := quorumProbeTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	var conn net.Conn
	var err error
	if n.tlsStream != nil {
		conn, err = n.tlsStream.Dial(raft.ServerAddress(addr), timeout)
	} else {
		conn, err = (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	return conn.Close()
}

// TransferLeadership hands leadership to the most up-to-date other voter
// and waits (bounded by ctx) until this node has stepped down. Leader only.
func (n *Node) TransferLeadership(ctx context.Context) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	if err := waitFuture(ctx, n.raft.LeadershipTransfer()); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return ErrNotLeader
		}
		if errors.Is(err, raft.ErrRaftShutdown) {
			return ErrShutdown
		}
		return fmt.Errorf("node: leadership transfer: %w", err)
	}
	return nil
}

func (n *Node) leaderOnly() error {
	if n.closing.Load() {
		return ErrShutdown
	}
	switch n.raft.State() {
	case raft.Leader:
		return nil
	case raft.Shutdown:
		return ErrShutdown
	}
	return ErrNotLeader
}

// joinRequest is the body of POST /v1/members.
type joinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

// Join asks a running cluster to add this node as a voter: it POSTs
// /v1/members to each of addrs (HTTP addresses of members; any member
// forwards to the leader) in turn, with backoff between rounds (100ms
// doubling to 5s), until one succeeds, ctx is done or the node shuts down.
// Every failure is retried, refusals included: a final-looking answer (a
// member conflict, a missing token, quorum_at_risk) may be repaired on the
// cluster's side while this node waits. The caller bounds it with ctx
// (serve: --join-timeout); the error then wraps ctx's and the last
// answer (a *JoinError when a member answered). It returns nil at once if
// this node is already a voter in its Raft configuration.
func (n *Node) Join(ctx context.Context, addrs []string) error {
	if len(addrs) == 0 {
		return errors.New("node: join: no addresses")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.ctx, cancel)
	defer stop()

	var lastErr error
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		if n.isVoter() {
			n.log.Info("already a voter; join not needed")
			return nil
		}
		for _, addr := range addrs {
			err := n.postJoin(ctx, addr)
			if err == nil {
				n.log.Info("joined the cluster", "via", addr)
				return nil
			}
			if ctx.Err() != nil {
				break
			}
			lastErr = err
			n.log.Warn("join attempt failed", "via", addr, "err", err)
		}
		if !sleepCtx(ctx, backoff) {
			if n.closing.Load() {
				return ErrShutdown
			}
			if lastErr == nil {
				return fmt.Errorf("node: join: %w", ctx.Err())
			}
			return fmt.Errorf("node: join: %w (last answer: %w)", ctx.Err(), lastErr)
		}
	}
}

// isVoter reports whether this node is a voter in its latest Raft
// configuration.
func (n *Node) isVoter() bool {
	servers, err := n.configuration()
	if err != nil {
		return false
	}
	for _, s := range servers {
		if string(s.ID) == n.cfg.NodeID && s.Suffrage == raft.Voter {
			return true
		}
	}
	return false
}

// postJoin sends one join request for this node to addr (host:port or a
// URL base).
// HeaderMemberAuth carries a member's signature of its join request:
// "<expires unix>:<base64url HMAC-SHA256>" under the cluster's replicated
// signing key. With auth on, the API admits such a request to POST
// /v1/members without an operator token: only a member has the key.
const HeaderMemberAuth = "X-Metastore-Member-Auth"

// SignMemberRequest signs a join request body valid until expires.
func SignMemberRequest(key []byte, expires int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "metastore-member-request-v1\n%d\n", expires)
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (n *Node) postJoin(ctx context.Context, addr string) error {
	body, err := json.Marshal(joinRequest{ID: n.cfg.NodeID, RaftAddr: n.cfg.RaftAdvertiseAddr(), HTTPAddr: n.cfg.HTTPAdvertiseAddr()})
	if err != nil {
		return err
	}
	base := addr
	if !strings.Contains(base, "://") {
		base = n.cfg.HTTPScheme() + "://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/members", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("node: join request to %s: %w", addr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if n.joinToken != "" {
		req.Header.Set("Authorization", "Bearer "+n.joinToken)
	}
	if key, err := n.fsm.URLKey(); err == nil && key != nil {
		// A member (it holds the replicated signing key) vouches for its
		// own record request: no operator token needed.
		exp := time.Now().Add(time.Minute).Unix()
		req.Header.Set(HeaderMemberAuth, strconv.FormatInt(exp, 10)+":"+SignMemberRequest(key, exp, body))
	}
	resp, err := n.httpClient.Do(req)
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			return fmt.Errorf("node: join request to %s: %w (the member's certificate does not chain to --tls-ca-file: is this node's CA the cluster's?)", addr, err)
		}
		return fmt.Errorf("node: join request to %s: %w", addr, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	je := &JoinError{Addr: addr, Status: resp.StatusCode}
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &eb) == nil && (eb.Error.Code != "" || eb.Error.Message != "") {
		je.Code, je.Field, je.Message = eb.Error.Code, eb.Error.Field, eb.Error.Message
	} else {
		je.Message = strings.TrimSpace(string(data))
		if len(je.Message) > 200 {
			je.Message = je.Message[:200]
		}
	}
	return je
}
