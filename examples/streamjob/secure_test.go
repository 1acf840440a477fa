package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecureCluster runs the example job on a three-member cluster with TLS
// (https for the API, mutual TLS for Raft, certificates made by `metastore
// certs`) and tokens (--auth) both on, as an operator would deploy it, and
// checks what a worker token and a member without the CA can do.
func TestSecureCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a cluster of metastore processes")
	}
	msBin, jobBin := binaries(t)
	dir := t.TempDir()
	mustRun := func(args ...string) string {
		t.Helper()
		p := start(t, "metastore "+strings.Join(args[:2], " "), msBin, args...)
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("metastore %q: exit %d\n%s\n%s", args, code, p.stdout, p.stderr)
		}
		return p.stdout.String()
	}
	certs := filepath.Join(dir, "certs")
	caFile := filepath.Join(certs, "ca.crt")
	mustRun("certs", "ca", "--out", certs)
	for i := 1; i <= 3; i++ {
		mustRun("certs", "member", "--ca-dir", certs, "--name", fmt.Sprintf("n%d", i), "--ip", "127.0.0.1", "--dns", "localhost")
	}
	// A process with a member certificate of another CA.
	rogueCerts := filepath.Join(dir, "rogue")
	mustRun("certs", "ca", "--out", rogueCerts)
	mustRun("certs", "member", "--ca-dir", rogueCerts, "--name", "n4", "--ip", "127.0.0.1", "--dns", "localhost")

	op, opFile := operatorToken(t)
	hc := caClient(t, caFile)
	ms := serveWith(t, msBin, 3, func(m *member) []string {
		m.scheme = "https"
		return []string{"--tls-cert-file", filepath.Join(certs, m.id+".crt"), "--tls-key-file", filepath.Join(certs, m.id+".key"),
			"--tls-ca-file", caFile}
	}, hc, "--auth", "--auth-bootstrap-token-file", opFile)

	// Plain http is refused by every member.
	for _, m := range ms {
		if err := getJSON("http://"+m.httpAddr+"/v1/status", &struct{}{}); err == nil {
			t.Fatalf("%s answered plain http", m.id)
		}
	}

	// The operator makes the jobs' worker tokens with the CLI over https.
	worker := workerToken(t, msBin, ms[0], opFile, "demo", "--ca-file", caFile)
	workerToken(t, msBin, ms[0], opFile, "other", "--ca-file", caFile)

	// The example job runs, crashes and resumes with a changed topology,
	// over https, on its worker token.
	out := runJob(t, jobBin, "--addr", addrs(ms), "--ca-file", caFile, "--job", "demo", "--token", worker, "run", "--epochs", "8")
	if !strings.Contains(out, "epoch 8 completed") {
		t.Fatalf("run output:\n%s", out)
	}
	out = runJob(t, jobBin, "--addr", addrs(ms), "--ca-file", caFile, "--job", "demo", "--token", worker, "resume", "--topology", "changed", "--epochs", "3")
	checkRestore(t, out, 8)

	// The worker token cannot reach job "other", the collector, the
	// members or the tokens, through any member; without a token, 401.
	checkWorkerScope(t, ms, hc, worker)

	// A member without the cluster's CA cannot join: its join request fails
	// the TLS check before any token is looked at. (It runs without --auth
	// so that its own /v1/status answers below.)
	rogue := &member{id: "n4", httpAddr: freeAddr(t), scheme: "https"}
	rogueRaft := freeAddr(t)
	rogue.proc = start(t, "metastore n4", msBin, append([]string{"serve", "--node-id", "n4",
		"--data-dir", filepath.Join(dir, "n4"), "--http-addr", rogue.httpAddr, "--raft-addr", rogueRaft,
		"--join", ms[0].url(""),
		"--tls-cert-file", filepath.Join(rogueCerts, "n4.crt"), "--tls-key-file", filepath.Join(rogueCerts, "n4.key"),
		"--tls-ca-file", filepath.Join(rogueCerts, "ca.crt")}, append(raftFlags, "--log-level", "info")...)...)
	defer rogue.kill()
	poll(t, 30*time.Second, "n4's failed join", func() error {
		if s := rogue.stderr.String(); !strings.Contains(s, "join attempt failed") || !strings.Contains(s, "certificate signed by unknown authority") {
			return fmt.Errorf("no refused join in n4's log yet")
		}
		return nil
	})
	// An operator who adds it anyway gets a voter that Raft never reaches:
	// the members refuse its certificate, nothing is replicated to it, and
	// the three others keep committing.
	p := start(t, "members add", msBin, "members", "add", "n4", "--raft-addr", rogueRaft, "--http-addr", rogue.httpAddr,
		"--addr", ms[0].url(""), "--ca-file", caFile, "--token-file", opFile)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("members add: exit %d: %s", code, p.stderr)
	}
	poll(t, 30*time.Second, "a refused Raft handshake with n4", func() error {
		if s := rogue.stderr.String(); !strings.Contains(s, "raft: refused a connection") {
			return fmt.Errorf("n4 logged no refused Raft connection yet")
		}
		return nil
	})
	runJob(t, jobBin, "--addr", addrs(ms), "--ca-file", caFile, "--job", "demo", "--token", worker, "resume", "--epochs", "2")
	var st struct {
		CommitIndex  uint64 `json:"commit_index"`
		AppliedIndex uint64 `json:"applied_index"`
		LeaderID     string `json:"leader_id"`
	}
	if err := getJSONWith(caClient(t, filepath.Join(rogueCerts, "ca.crt")), rogue.url("/v1/status"), &st); err != nil {
		t.Fatalf("n4 status: %v", err)
	}
	if st.CommitIndex != 0 || st.AppliedIndex != 0 || st.LeaderID != "" {
		t.Fatalf("n4 took part in Raft: %+v", st)
	}
	p = start(t, "members remove", msBin, "members", "remove", "n4", "--addr", ms[0].url(""), "--ca-file", caFile, "--token-file", opFile)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("members remove: exit %d: %s", code, p.stderr)
	}

	// No member logged a token secret.
	noSecretsLogged(t, append(ms, rogue), op, worker)
}
