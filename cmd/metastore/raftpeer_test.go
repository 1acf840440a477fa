package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// hostileAppend is issue 13's third attack: a stranger who can reach a
// member's Raft port speaks hashicorp/raft's own protocol to it. It asks
// the member for its term and last index (an AppendEntries at term 0,
// which it refuses with both), then claims leadership at a higher term
// with one entry after the member's last: a command creating an operator
// token whose secret the attacker chose. Raft authenticates nothing, so a
// member without mutual TLS appends it, commits it and applies it.
func hostileAppend(target string, cmd []byte) error {
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
	if err != nil {
		return err
	}
	defer trans.Close()
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(trans.LocalAddr())}
	var probe raft.AppendEntriesResponse
	if err := trans.AppendEntries("victim", raft.ServerAddress(target), &raft.AppendEntriesRequest{RPCHeader: header}, &probe); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	term := probe.Term + 10
	// The member's last entry is from its current term or an earlier one:
	// try them from the newest.
	for prev := probe.Term; prev > 0; prev-- {
		var resp raft.AppendEntriesResponse
		req := &raft.AppendEntriesRequest{
			RPCHeader:         header,
			Term:              term,
			PrevLogEntry:      probe.LastLog,
			PrevLogTerm:       prev,
			Entries:           []*raft.Log{{Index: probe.LastLog + 1, Term: term, Type: raft.LogCommand, Data: cmd}},
			LeaderCommitIndex: probe.LastLog + 1,
		}
		if err := trans.AppendEntries("victim", raft.ServerAddress(target), req, &resp); err != nil {
			return fmt.Errorf("append: %w", err)
		}
		if resp.Success {
			return nil
		}
	}
	return errors.New("the member refused every previous term")
}

// forgedToken is the attacker's command: an operator token with a secret
// only the attacker knows.
func forgedToken(t *testing.T) (secret string, cmd []byte) {
	t.Helper()
	secret = api.GenerateToken()
	cmd, err := fsm.Encode(fsm.CmdTokenCreate, time.Now(), &fsm.TokenCreate{
		Accessor: "00000000deadbeef", Hash: wire.TokenHash(secret), Role: wire.RoleOperator, Description: "intruder"})
	if err != nil {
		t.Fatal(err)
	}
	return secret, cmd
}

// tokenStatus is the status GET /v1/tokens answers with the bearer token.
func tokenStatus(hc *http.Client, url, secret string) (int, error) {
	req, _ := http.NewRequest("GET", url+"/v1/tokens", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestHostileRaftPeer: --auth without TLS on a Raft address others reach
// refuses to start; with --insecure-raft (the documented override) the
// hostile peer mints itself an operator token, which the API then
// accepts; with mutual-TLS Raft the same peer cannot even speak to the
// port and its token is unknown.
func TestHostileRaftPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts metastore processes; skipped in -short mode")
	}
	dir := t.TempDir()
	bootstrap := filepath.Join(dir, "bootstrap.token")
	if err := os.WriteFile(bootstrap, []byte(api.GenerateToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A Raft address that is not loopback: every interface, advertised on
	// loopback so that the single member can reach itself.
	raftPort := func() (addr, advertise string) {
		a := freeAddr(t)
		_, port, _ := net.SplitHostPort(a)
		return "0.0.0.0:" + port, "127.0.0.1:" + port
	}

	t.Run("auth with clear-text Raft on the network refuses to start", func(t *testing.T) {
		addr, adv := raftPort()
		code, _, errOut := runBinary(t, t.TempDir(), nil, "serve", "--auth", "--http-addr", freeAddr(t), "--raft-addr", addr, "--raft-advertise", adv)
		if code != exitUsage || !strings.Contains(errOut, "invalid --auth: Raft listens on") || !strings.Contains(errOut, "--insecure-raft") {
			t.Fatalf("exit %d, stderr %q; want %d and an error naming the exposure and the override", code, errOut, exitUsage)
		}
	})

	start := func(t *testing.T, id string, extra ...string) (*clProc, string) {
		addr, adv := raftPort()
		p := &clProc{id: id, httpAddr: freeAddr(t), raftAddr: adv, dataDir: filepath.Join(dir, id)}
		p.args = append([]string{"serve", "--node-id", id, "--data-dir", p.dataDir, "--http-addr", p.httpAddr,
			"--raft-addr", addr, "--raft-advertise", adv, "--auth", "--auth-bootstrap-token-file", bootstrap}, clRaftFlags...)
		p.args = append(p.args, extra...)
		p.start(t)
		t.Cleanup(func() {
			p.kill(t)
			if t.Failed() {
				t.Logf("--- %s stderr:\n%s", id, tail(p.stderr.String(), 4096))
			}
		})
		return p, adv
	}

	t.Run("auth with --insecure-raft: the hostile peer becomes an operator", func(t *testing.T) {
		p, raftAddr := start(t, "insecure", "--insecure-raft")
		hc := &http.Client{Timeout: 10 * time.Second}
		waitFor(t, 30*time.Second, func() error {
			if st, err := tokenStatus(hc, "http://"+p.httpAddr, strings.TrimSpace(readFile(t, bootstrap))); err != nil || st != 200 {
				return fmt.Errorf("bootstrap token: %d %v", st, err)
			}
			return nil
		})
		secret, cmd := forgedToken(t)
		if st, _ := tokenStatus(hc, "http://"+p.httpAddr, secret); st != http.StatusUnauthorized {
			t.Fatalf("the forged token works before the attack: %d", st)
		}
		if err := hostileAppend(raftAddr, cmd); err != nil {
			t.Fatalf("hostile peer: %v", err)
		}
		waitFor(t, 30*time.Second, func() error {
			st, err := tokenStatus(hc, "http://"+p.httpAddr, secret)
			if err != nil || st != http.StatusOK {
				return fmt.Errorf("forged token: %d %v", st, err)
			}
			return nil
		})
	})

	t.Run("auth with mutual-TLS Raft: the hostile peer is refused", func(t *testing.T) {
		caDir := filepath.Join(dir, "certs")
		for _, args := range [][]string{{"certs", "ca", "--out", caDir},
			{"certs", "member", "--ca-dir", caDir, "--name", "secure", "--ip", "127.0.0.1", "--dns", "localhost"}} {
			if code, out, errOut := runBinary(t, dir, nil, args...); code != 0 {
				t.Fatalf("metastore %q: exit %d: %s %s", args, code, out, errOut)
			}
		}
		caFile := filepath.Join(caDir, "ca.crt")
		p, raftAddr := start(t, "secure", "--tls-cert-file", filepath.Join(caDir, "secure.crt"),
			"--tls-key-file", filepath.Join(caDir, "secure.key"), "--tls-ca-file", caFile)
		hc := httpsClient(t, caFile)
		waitFor(t, 30*time.Second, func() error {
			if st, err := tokenStatus(hc, "https://"+p.httpAddr, strings.TrimSpace(readFile(t, bootstrap))); err != nil || st != 200 {
				return fmt.Errorf("bootstrap token: %d %v", st, err)
			}
			return nil
		})
		secret, cmd := forgedToken(t)
		if err := hostileAppend(raftAddr, cmd); err == nil {
			t.Fatal("the member accepted AppendEntries from a peer without a member certificate")
		}
		// The API, answered by the leader after a linearizable read, does
		// not know the token.
		if st, err := tokenStatus(hc, "https://"+p.httpAddr, secret); err != nil || st != http.StatusUnauthorized {
			t.Fatalf("forged token after the refused attack: %d %v, want 401", st, err)
		}
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
