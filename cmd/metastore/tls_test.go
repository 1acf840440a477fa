package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// The tests in this file run metastore with TLS: the certs commands, and a
// cluster of real processes with https and mutual-TLS Raft.

func TestCertsCommands(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	var out, errOut bytes.Buffer
	if code := run([]string{"certs", "ca", "--out", caDir, "--validity", "30d"}, &out, &errOut, noEnv); code != exitOK {
		t.Fatalf("certs ca: exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"certs", "member", "--ca-dir", caDir, "--name", "n1", "--ip", "127.0.0.1", "--ip", "10.0.0.1,10.0.0.2",
		"--dns", "localhost", "--validity", "48h", "--out", filepath.Join(dir, "n1")}, &out, &errOut, noEnv); code != exitOK {
		t.Fatalf("certs member: exit %d: %s", code, errOut.String())
	}
	for f, mode := range map[string]os.FileMode{
		filepath.Join(caDir, "ca.crt"): 0o644, filepath.Join(caDir, "ca.key"): 0o600,
		filepath.Join(dir, "n1", "n1.crt"): 0o644, filepath.Join(dir, "n1", "n1.key"): 0o600,
	} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", f, fi.Mode().Perm(), mode)
		}
	}
	ca := readCert(t, filepath.Join(caDir, "ca.crt"))
	member := readCert(t, filepath.Join(dir, "n1", "n1.crt"))
	if !ca.IsCA || ca.NotAfter.Sub(ca.NotBefore) < 30*24*time.Hour || ca.NotAfter.Sub(ca.NotBefore) > 31*24*time.Hour {
		t.Errorf("CA: IsCA %v, valid %v to %v", ca.IsCA, ca.NotBefore, ca.NotAfter)
	}
	if err := member.CheckSignatureFrom(ca); err != nil {
		t.Errorf("member not signed by the CA: %v", err)
	}
	if got := fmt.Sprint(member.IPAddresses, member.DNSNames); got != "[127.0.0.1 10.0.0.1 10.0.0.2] [localhost]" {
		t.Errorf("SANs %s", got)
	}
	if d := member.NotAfter.Sub(member.NotBefore); d < 48*time.Hour || d > 49*time.Hour {
		t.Errorf("member validity %v", d)
	}
	if len(member.ExtKeyUsage) != 2 || member.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || member.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Errorf("member key usage %v", member.ExtKeyUsage)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"certs", "ca", "--out", caDir}, exitFailure, "exists; not overwriting"},
		{[]string{"certs", "ca"}, exitUsage, "--out is required"},
		{[]string{"certs", "ca", "--out", caDir, "--validity", "-3d"}, exitUsage, "validity"},
		{[]string{"certs", "member", "--ca-dir", caDir, "--name", "n2"}, exitUsage, "at least one --ip or --dns"},
		{[]string{"certs", "member", "--ca-dir", caDir, "--name", "n2", "--ip", "not-an-ip"}, exitUsage, `--ip "not-an-ip"`},
		{[]string{"certs", "member", "--ca-dir", dir, "--name", "n2", "--dns", "x"}, exitFailure, "ca.crt"},
		{[]string{"certs", "member", "--ca-dir", caDir, "--name", "n1", "--dns", "x", "--out", filepath.Join(dir, "n1")}, exitFailure, "exists"},
	} {
		out.Reset()
		errOut.Reset()
		code := run(tc.args, &out, &errOut, noEnv)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: exit %d %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
	// --force replaces a member certificate.
	if code := run([]string{"certs", "member", "--ca-dir", caDir, "--name", "n1", "--dns", "x", "--out", filepath.Join(dir, "n1"), "--force"}, &out, &errOut, noEnv); code != exitOK {
		t.Fatalf("certs member --force: exit %d: %s", code, errOut.String())
	}
	if readCert(t, filepath.Join(dir, "n1", "n1.crt")).SerialNumber.Cmp(member.SerialNumber) == 0 {
		t.Fatal("--force did not replace the certificate")
	}
}

func noEnv(string) string { return "" }

func readCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", file)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestServeTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runBinary(t, dir, nil, "serve", "--tls-cert-file", "n1.crt", "--tls-ca-file", "ca.crt")
	if code != exitUsage || !strings.Contains(errOut, "invalid --tls-key-file: required when --tls-cert-file and --tls-ca-file are set") {
		t.Errorf("missing key file: exit %d: %s", code, errOut)
	}
	code, _, errOut = runBinary(t, dir, []string{"METASTORE_TLS_KEY_FILE=n1.key"}, "serve")
	if code != exitUsage || !strings.Contains(errOut, "invalid --tls-cert-file: required when --tls-key-file is set") {
		t.Errorf("key file from the environment alone: exit %d: %s", code, errOut)
	}
	code, _, errOut = runBinary(t, dir, nil, "serve", "--data-dir", filepath.Join(dir, "d"), "--http-addr", freeAddr(t), "--raft-addr", freeAddr(t),
		"--tls-cert-file", "missing.crt", "--tls-key-file", "missing.key", "--tls-ca-file", "missing-ca.crt")
	if code != exitFailure || !strings.Contains(errOut, "cannot load the TLS material") || !strings.Contains(errOut, "missing.crt") {
		t.Errorf("missing files: exit %d: %s", code, errOut)
	}
}

// tlsMember is one process of a TLS cluster and its files.
type tlsMember struct {
	*clProc
	certFile, keyFile string
}

// https is an https client of the cluster: it trusts caFile.
func httpsClient(t *testing.T, caFile string) *http.Client {
	t.Helper()
	cfg, err := client.LoadTLSConfig(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func httpsGet(hc *http.Client, url string, out any) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

// serverSerial handshakes with the https server at addr and returns the
// serial number of its certificate.
func serverSerial(addr, caFile string) (*big.Int, error) {
	cfg, err := client.LoadTLSConfig(caFile, "", "")
	if err != nil {
		return nil, err
	}
	cfg.ServerName = "127.0.0.1"
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// TestClusterTLS runs three members with TLS made by 'metastore certs':
// they elect a leader over mutual-TLS Raft, a write through a follower is
// forwarded over https, the Go client and the CLI read it back over https.
// A fourth process with a certificate of another CA cannot join: its join
// request is refused at the TLS handshake, and when an operator adds it
// anyway, the leader refuses its Raft listener and it never replicates.
// Last, certificates are replaced on a running member and picked up on
// SIGHUP; a broken file keeps the old one.
func TestClusterTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes; skipped in -short mode")
	}
	dir := t.TempDir()
	caDir := filepath.Join(dir, "certs")
	caFile := filepath.Join(caDir, "ca.crt")
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, errOut := runBinary(t, dir, nil, args...)
		if code != 0 {
			t.Fatalf("metastore %q: exit %d: %s %s", args, code, out, errOut)
		}
		return out
	}
	mustRun("certs", "ca", "--out", caDir)

	var members []*tlsMember
	var peers []string
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		mustRun("certs", "member", "--ca-dir", caDir, "--name", id, "--ip", "127.0.0.1", "--dns", "localhost")
		m := &tlsMember{
			clProc:   &clProc{id: id, httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(dir, id)},
			certFile: filepath.Join(caDir, id+".crt"), keyFile: filepath.Join(caDir, id+".key"),
		}
		members = append(members, m)
		peers = append(peers, id+"="+m.raftAddr)
	}
	tlsArgs := func(m *tlsMember, ca string) []string {
		return []string{"--tls-cert-file", m.certFile, "--tls-key-file", m.keyFile, "--tls-ca-file", ca}
	}
	for _, m := range members {
		m.args = append([]string{"serve", "--node-id", m.id, "--data-dir", m.dataDir, "--http-addr", m.httpAddr,
			"--raft-addr", m.raftAddr, "--initial-cluster", strings.Join(peers, ",")}, clRaftFlags...)
		m.args = append(m.args, tlsArgs(m, caFile)...)
		m.start(t)
	}
	var all []*tlsMember
	all = append(all, members...)
	t.Cleanup(func() {
		for _, m := range all {
			m.kill(t)
		}
		if t.Failed() {
			for _, m := range all {
				t.Logf("--- %s stderr (last 6 KiB):\n%s", m.id, tail(m.stderr.String(), 6144))
			}
		}
	})

	hc := httpsClient(t, caFile)
	url := func(m *tlsMember, path string) string { return "https://" + m.httpAddr + path }
	var leader *tlsMember
	waitFor(t, 30*time.Second, func() error {
		leader = nil
		ids := map[string]bool{}
		for _, m := range members {
			var st struct {
				clStatus
				LeaderHTTPAddr string `json:"leader_http_addr"`
			}
			if err := httpsGet(hc, url(m, "/v1/status"), &st); err != nil {
				return err
			}
			if st.LeaderHTTPAddr == "" {
				return fmt.Errorf("%s does not know the leader's HTTP address yet", m.id)
			}
			ids[st.LeaderID] = true
			if st.State == "leader" {
				leader = m
			}
			if len(st.Members) != 3 {
				return fmt.Errorf("%s sees %d members", m.id, len(st.Members))
			}
		}
		if len(ids) != 1 || leader == nil || ids[""] {
			return fmt.Errorf("no agreed leader: %v", ids)
		}
		return nil
	})
	var follower *tlsMember
	for _, m := range members {
		if m != leader {
			follower = m
			break
		}
	}
	t.Logf("leader %s, writing through follower %s", leader.id, follower.id)

	// Plain http is not served.
	if status, body := clDo("GET", "http://"+follower.httpAddr+"/v1/status", nil); status != http.StatusBadRequest {
		t.Fatalf("plain http to a TLS member: %d %s", status, body)
	}

	// A write through the follower is forwarded to the leader over https.
	req, _ := http.NewRequest("PUT", url(follower, "/v1/jobs/tlsjob"), strings.NewReader(`{"config":{"retained":2}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT via follower: %d %s", resp.StatusCode, body)
	}
	if servedBy := resp.Header.Values("X-Metastore-Served-By"); !strings.Contains(strings.Join(servedBy, ","), leader.id) {
		t.Fatalf("the write was not forwarded to the leader %s: served by %v", leader.id, servedBy)
	}

	// The Go client over https (a bare host:port means https with TLS
	// set): reads, an attempt, and a blob uploaded to the https URL the
	// store hands out.
	tlsCfg, err := client.LoadTLSConfig(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{Endpoints: []string{follower.httpAddr}, TLS: tlsCfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job, err := c.Job(ctx, "tlsjob")
	if err != nil || job.Config.Retained != 2 {
		t.Fatalf("client read: %+v %v", job, err)
	}
	caps, err := wire.ParseCaps([]string{"state"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartAttempt(ctx, "tlsjob", "a1", []wire.Task{{ID: "t0", Caps: caps}}); err != nil {
		t.Fatalf("start attempt over https: %v", err)
	}
	slots, err := c.UploadSlots(ctx, "tlsjob", 1, "t0", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(slots[0].URL, "https://") {
		t.Fatalf("upload URL %q is not https", slots[0].URL)
	}
	blob := []byte("checkpoint bytes over https")
	if err := c.PutObject(ctx, slots[0], bytes.NewReader(blob), int64(len(blob))); err != nil {
		t.Fatalf("upload over https: %v", err)
	}
	for _, e := range c.Endpoints() {
		if !strings.HasPrefix(e, "https://") {
			t.Fatalf("the client learned a non-https endpoint %q", e)
		}
	}

	// The CLI with --ca-file (and from METASTORE_CA_FILE).
	out := mustRun("jobs", "show", "tlsjob", "--addr", follower.httpAddr, "--ca-file", caFile)
	if !strings.Contains(out, "tlsjob") {
		t.Fatalf("jobs show: %s", out)
	}
	if code, out, errOut := runBinary(t, dir, []string{"METASTORE_CA_FILE=" + caFile, "METASTORE_ADDR=" + leader.httpAddr}, "status"); code != 0 || !strings.Contains(out, "leader") {
		t.Fatalf("status with METASTORE_CA_FILE: exit %d: %s %s", code, out, errOut)
	}
	if code, _, errOut := runBinary(t, dir, nil, "status", "--addr", "https://"+leader.httpAddr); code != exitFailure || !strings.Contains(errOut, "--ca-file") {
		t.Fatalf("status without the CA: exit %d: %s", code, errOut)
	}

	// A process with a certificate of another CA asks to join.
	otherDir := filepath.Join(dir, "other")
	mustRun("certs", "ca", "--out", otherDir, "--name", "other CA")
	mustRun("certs", "member", "--ca-dir", otherDir, "--name", "n4", "--ip", "127.0.0.1")
	rogue := &tlsMember{
		clProc:   &clProc{id: "n4", httpAddr: freeAddr(t), raftAddr: freeAddr(t), dataDir: filepath.Join(dir, "n4")},
		certFile: filepath.Join(otherDir, "n4.crt"), keyFile: filepath.Join(otherDir, "n4.key"),
	}
	rogue.args = append([]string{"serve", "--node-id", "n4", "--data-dir", rogue.dataDir, "--http-addr", rogue.httpAddr,
		"--raft-addr", rogue.raftAddr, "--join", leader.httpAddr}, clRaftFlags...)
	rogue.args = append(rogue.args, tlsArgs(rogue, filepath.Join(otherDir, "ca.crt"))...)
	rogue.start(t)
	all = append(all, rogue)
	waitFor(t, 30*time.Second, func() error {
		if s := rogue.stderr.String(); !strings.Contains(s, "join attempt failed") || !strings.Contains(s, "certificate signed by unknown authority") {
			return fmt.Errorf("n4 has not reported a refused join yet")
		}
		return nil
	})
	var st clStatus
	if err := httpsGet(hc, url(leader, "/v1/status"), &st); err != nil || len(st.Members) != 3 {
		t.Fatalf("after the refused join the leader sees %+v (%v)", st.Members, err)
	}

	// An operator adds it anyway: the configuration changes (three of four
	// voters are a quorum) but the leader refuses the member's Raft
	// listener, so nothing is replicated to it.
	mustRun("members", "add", "n4", "--raft-addr", rogue.raftAddr, "--http-addr", rogue.httpAddr,
		"--addr", leader.httpAddr, "--ca-file", caFile)
	waitFor(t, 30*time.Second, func() error {
		s := leader.stderr.String()
		if !strings.Contains(s, "raft: TLS handshake with a member failed") || !strings.Contains(s, rogue.raftAddr) {
			return fmt.Errorf("the leader has not refused n4's Raft listener yet")
		}
		if !strings.Contains(rogue.stderr.String(), "raft: refused a connection: the connecting peer rejected this member's certificate") {
			return fmt.Errorf("n4 has not logged the refused Raft connection yet")
		}
		return nil
	})
	t.Logf("leader %s refused n4:\n%s", leader.id, firstLine(grepLines(leader.stderr.String(), "raft: TLS handshake with a member failed")))
	t.Logf("n4 logged:\n%s\n%s", firstLine(grepLines(rogue.stderr.String(), "join attempt failed")),
		firstLine(grepLines(rogue.stderr.String(), "raft: refused a connection")))
	if !strings.Contains(rogue.stderr.String(), "does not chain to --tls-ca-file") {
		t.Fatal("n4's join failure does not explain the certificate problem")
	}
	rogueHC := httpsClient(t, filepath.Join(otherDir, "ca.crt"))
	var rst clStatus
	if err := httpsGet(rogueHC, url(rogue, "/v1/status"), &rst); err != nil {
		t.Fatal(err)
	}
	if rst.LeaderID != "" || rst.CommitIndex != 0 || rst.AppliedIndex != 0 || len(rst.Members) != 0 {
		t.Fatalf("n4 took part in replication: %+v", rst)
	}
	// The three members still commit writes.
	if _, err := c.BeginEpoch(ctx, "tlsjob", 1, 1); err != nil {
		t.Fatalf("write with n4 refused: %v", err)
	}
	mustRun("epochs", "abort", "tlsjob", "1", "--addr", follower.httpAddr, "--ca-file", caFile)
	mustRun("members", "remove", "n4", "--addr", leader.httpAddr, "--ca-file", caFile)
	rogue.kill(t)

	// Certificate reload on a running member: a new certificate, then
	// SIGHUP; the next handshake presents it.
	target := follower
	before, err := serverSerial(target.httpAddr, caFile)
	if err != nil {
		t.Fatal(err)
	}
	mustRun("certs", "member", "--ca-dir", caDir, "--name", target.id, "--ip", "127.0.0.1", "--force")
	want := readCert(t, target.certFile).SerialNumber
	if want.Cmp(before) == 0 {
		t.Fatal("the new certificate has the old serial")
	}
	if err := target.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		got, err := serverSerial(target.httpAddr, caFile)
		if err != nil {
			return err
		}
		if got.Cmp(want) != 0 {
			return fmt.Errorf("serving serial %v, want %v", got, want)
		}
		return nil
	})
	// A broken certificate file is refused; the member keeps serving the
	// certificate it has, and counts the error.
	if err := os.WriteFile(target.certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := target.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() error {
		if !strings.Contains(target.stderr.String(), "TLS files changed but cannot be used; keeping the certificate in use") {
			return fmt.Errorf("no reload error logged yet")
		}
		return nil
	})
	if got, err := serverSerial(target.httpAddr, caFile); err != nil || got.Cmp(want) != 0 {
		t.Fatalf("after a broken file: serial %v (%v), want %v", got, err, want)
	}
	resp, err = hc.Get(url(target, "/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `metastore_tls_reloads_total{result="error"} 1`) ||
		!strings.Contains(string(metrics), `metastore_tls_reloads_total{result="ok"} 1`) {
		t.Fatalf("reload metrics:\n%s", grepLines(string(metrics), "metastore_tls"))
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if findings := promtoolLint(t, promtool, metrics); findings != "" {
			t.Errorf("promtool check metrics on a TLS member:\n%s", findings)
		}
	} else {
		t.Logf("/metrics of a TLS member not linted: %s", promtoolMissing)
	}
	// Writes through the reloaded member (forwarded to the leader) still
	// commit.
	viaTarget, err := client.New(client.Config{Endpoints: []string{target.httpAddr}, TLS: tlsCfg, DisableDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := viaTarget.BeginEpoch(ctx, "tlsjob", 1, 2); err != nil {
		t.Fatalf("write after the reload: %v", err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func TestClientTLSFlags(t *testing.T) {
	env := map[string]string{"METASTORE_CA_FILE": "/etc/ms/ca.crt"}
	for _, tc := range []struct {
		getenv func(string) string
		args   []string
		want   string
	}{
		{noEnv, nil, "http://127.0.0.1:7070"},
		{noEnv, []string{"--ca-file", "ca.crt"}, "https://127.0.0.1:7070"},
		{noEnv, []string{"--ca-file", "ca.crt", "--addr", "10.0.0.1:7070"}, "https://10.0.0.1:7070"},
		{noEnv, []string{"--ca-file", "ca.crt", "--addr", "http://10.0.0.1:7070"}, "http://10.0.0.1:7070"},
		{func(k string) string { return env[k] }, []string{"--addr", "10.0.0.1:7070"}, "https://10.0.0.1:7070"},
	} {
		fs, o := newClientFlags("status", tc.getenv)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		u, err := o.baseURL()
		if err != nil || u.String() != tc.want {
			t.Errorf("%q: base URL %v (%v), want %s", tc.args, u, err, tc.want)
		}
	}
	fs, o := newClientFlags("status", noEnv)
	_ = fs.Parse([]string{"--ca-file", "ca.crt", "--cert-file", "c.crt"})
	if _, err := o.tls.httpClient(); err == nil || !strings.Contains(err.Error(), "--cert-file and --key-file go together") {
		t.Errorf("cert without key: %v", err)
	}
}
