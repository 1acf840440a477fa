package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/internal/faultpoint"
	"github.com/metastore/metastore/jepsen/s3proxy"
	"github.com/metastore/metastore/jepsen/tcpproxy"
)

// TestDefaultBuildHasNoFaultPoints proves the fault points cost nothing in
// production: the default build of the binary links none of their code,
// the faultinject build does.
func TestDefaultBuildHasNoFaultPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary twice; skipped in -short mode")
	}
	ctx := context.Background()
	dir := t.TempDir()
	symbols := func(tags []string) string {
		bin := filepath.Join(dir, "metastore-"+strings.Join(tags, "-"))
		if err := Build(ctx, MetastorePackage, bin, tags, false); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(GoTool(), "tool", "nm", bin).Output()
		if err != nil {
			t.Fatalf("go tool nm: %v", err)
		}
		return string(out)
	}
	// Small hooks may be inlined; the faultpoint package and the sink
	// wrapper's methods are always there when compiled in.
	def := symbols(nil)
	for _, m := range []string{"internal/faultpoint", "gc.faultAfterMark", "node.faultFSM", "node.faulting"} {
		if strings.Contains(def, m) {
			t.Errorf("the default build contains %s", m)
		}
	}
	fi := symbols([]string{FaultInjectTag})
	for _, m := range []string{"internal/faultpoint.Hit", "node.faultingSink.Close", "node.faultingFSM.Snapshot"} {
		if !strings.Contains(fi, m) {
			t.Errorf("the faultinject build lacks %s", m)
		}
	}
}

func TestGrudges(t *testing.T) {
	all := []string{"n1", "n2", "n3"}
	if got := Isolate("n1", all).String(); got != "n1->n2 n1->n3 n2->n1 n3->n1" {
		t.Errorf("isolate: %s", got)
	}
	if got := Bridge("n2", []string{"n1"}, []string{"n3"}).String(); got != "n1->n3 n3->n1" {
		t.Errorf("bridge: %s", got)
	}
	if got := OneWay("n1", "n2").String(); got != "n1->n2" {
		t.Errorf("one way: %s", got)
	}
	if got := Merge(OneWay("n1", "n2"), OneWay("n2", "n1"), OneWay("n1", "n2")).String(); got != "n1->n2 n2->n1" {
		t.Errorf("merge: %s", got)
	}
}

// write creates a job, an attempt, an epoch and an ack through the API.
func write(t *testing.T, c *Cluster, job string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must := func(_ *Response, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Send(ctx, "PUT", "/v1/jobs/"+job, map[string]any{"config": map[string]any{"retained": 2}}, nil))
	must(c.Send(ctx, "POST", "/v1/jobs/"+job+"/attempts", map[string]any{"attempt_id": "a1",
		"tasks": []map[string]any{{"id": "t1", "capabilities": []string{"state"}}}}, nil))
	must(c.Send(ctx, "POST", "/v1/jobs/"+job+"/epochs", map[string]any{"generation": 1, "epoch": 1}, nil))
	var ack struct {
		Completed bool `json:"completed_by_this_ack"`
	}
	must(c.Send(ctx, "PUT", "/v1/jobs/"+job+"/epochs/1/acks/t1", map[string]any{"generation": 1,
		"payloads": map[string][]byte{"state": []byte("hello " + job)}}, &ack))
	if !ack.Completed {
		t.Fatalf("ack did not complete the epoch")
	}
}

// TestClusterNetworkAndProxies starts the cluster, writes through the API,
// checks the S3 proxy sees the members' traffic, cuts a follower off with
// iptables (and checks it really cannot reach the others while the test
// process still can), delays the Raft links, and checks convergence.
func TestClusterNetworkAndProxies(t *testing.T) {
	c := StartT(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(t, c, "j1")
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	// A blob uploaded with the presigned URL a member hands out passes
	// the S3 proxy; verify makes the leader HEAD it through the proxy.
	key := upload(t, c, "j1", "t1")
	if _, err := c.Send(ctx, "PUT", "/v1/jobs/j1/epochs/2/acks/t1", map[string]any{"generation": 1,
		"manifest": map[string]any{"blobs": []map[string]any{{"key": key, "size": 5}},
			"full": map[string]any{"bases": []map[string]any{{"key": key, "length": 5}}}}}, nil); err == nil {
		t.Fatal("ack of an epoch never begun succeeded")
	}
	if _, err := c.Send(ctx, "POST", "/v1/jobs/j1/epochs", map[string]any{"generation": 1, "epoch": 2}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, "PUT", "/v1/jobs/j1/epochs/2/acks/t1", map[string]any{"generation": 1,
		"manifest": map[string]any{"blobs": []map[string]any{{"key": key, "size": 5}},
			"full": map[string]any{"bases": []map[string]any{{"key": key, "length": 5}}}}}, nil); err != nil {
		t.Fatal(err)
	}
	var verify struct {
		Missing []any `json:"missing"`
	}
	if _, err := c.Send(ctx, "GET", "/v1/jobs/j1/verify", nil, &verify); err != nil || len(verify.Missing) != 0 {
		t.Fatalf("verify: %+v %v", verify, err)
	}
	ops := map[string]bool{}
	for _, r := range c.S3.Requests() {
		ops[r.Client+" "+string(r.Op)] = true
	}
	if !ops["test PUT"] || !ops[leader.ID+" HEAD"] {
		t.Errorf("S3 proxy log lacks the test's PUT or the leader's HEAD: %v", ops)
	}
	// The faultpoint control API answers on every member.
	for _, m := range c.Serving() {
		if _, err := m.Faults().Get(ctx, faultpoint.GCAfterMark); err != nil {
			t.Errorf("%s faultpoint API: %v", m.ID, err)
		}
	}

	// Isolate a follower: it cannot reach the leader's HTTP API (iptables
	// in its namespace), loses the leader, and the majority goes on.
	f := c.Followers(leader)[0]
	if err := c.Partition(ctx, Isolate(f.ID, IDs(c.Serving()))); err != nil {
		t.Fatal(err)
	}
	rules, _ := c.PartitionRules(ctx, f.ID)
	t.Logf("rules in %s:\n%s", f.NS, rules)
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", f.NS, "bash", "-c",
		fmt.Sprintf("timeout 2 bash -c 'exec 3<>/dev/tcp/%s/%d' && echo open || echo blocked", leader.IP, HTTPPort)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "blocked") {
		t.Fatalf("%s reached the leader's API through the partition: %s %v", f.ID, out, err)
	}
	write(t, c, "j2")
	waitFor(t, ctx, 20*time.Second, func() error {
		st, err := c.Status(ctx, f)
		if err != nil {
			return err
		}
		if st.LeaderID != "" {
			return fmt.Errorf("%s still knows leader %s", f.ID, st.LeaderID)
		}
		return nil
	})
	if err := c.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// A one-way cut f->leader drops f's answers too: the leader cannot
	// open a connection to f's API (f's SYN-ACK is dropped), f's proxy
	// holds what f answers on the Raft connections the leader opened, and
	// the majority goes on.
	leader, err = c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f = c.Followers(leader)[0]
	if err := c.Partition(ctx, OneWay(f.ID, leader.ID)); err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(ctx, "ip", "netns", "exec", leader.NS, "bash", "-c",
		fmt.Sprintf("timeout 2 bash -c 'exec 3<>/dev/tcp/%s/%d' && echo open || echo blocked", f.IP, HTTPPort)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "blocked") {
		t.Fatalf("%s answered %s through a one-way cut %s->%s: %s %v", f.ID, leader.ID, f.ID, leader.ID, out, err)
	}
	if got := f.Proxy().Held(leader.IP); got != tcpproxy.FromTarget {
		t.Fatalf("%s's proxy holds %v for %s, want its answers held", f.ID, got, leader.ID)
	}
	if got := leader.Proxy().Held(f.IP); got != 0 {
		t.Fatalf("%s's proxy holds %v for %s: the cut is one-way", leader.ID, got, f.ID)
	}
	write(t, c, "j2b")
	if err := c.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.Proxy().Held(leader.IP); got != 0 {
		t.Fatalf("heal left %v held", got)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// Delay every Raft link by 100ms: writes still work, slower.
	c.SetLinks(tcpproxy.Link{Delay: 100 * time.Millisecond})
	start := time.Now()
	write(t, c, "j3")
	t.Logf("4 writes with 100ms Raft links took %s", time.Since(start))
	c.ClearLinks()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	var forwarded int64
	for _, m := range c.Members() {
		forwarded += m.Proxy().Stats().BytesToTarget
	}
	if forwarded == 0 {
		t.Fatal("no Raft bytes went through the proxies")
	}
	puts := 0
	for _, r := range c.S3.Requests() {
		if r.Op == s3proxy.OpPut && r.Status == 200 {
			puts++
		}
	}
	if puts != 1 {
		t.Errorf("S3 log: %d successful PUTs, want 1", puts)
	}
}

// upload asks for an upload slot and PUTs 5 bytes to its presigned URL.
func upload(t *testing.T, c *Cluster, job, task string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ans struct {
		Uploads []struct {
			Key    string      `json:"key"`
			URL    string      `json:"url"`
			Header http.Header `json:"header"`
		} `json:"uploads"`
	}
	if _, err := c.Send(ctx, "POST", "/v1/jobs/"+job+"/uploads", map[string]any{"generation": 1, "task": task, "count": 1}, &ans); err != nil || len(ans.Uploads) != 1 {
		t.Fatalf("uploads: %+v %v", ans, err)
	}
	u := ans.Uploads[0]
	req, _ := http.NewRequestWithContext(ctx, "PUT", u.URL, strings.NewReader("hello"))
	for k, vs := range u.Header {
		req.Header[k] = vs
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT %s: %d", u.URL, resp.StatusCode)
	}
	return u.Key
}

func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("not within %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRemoveLeftovers builds what a crashed run leaves behind (a bridge,
// a namespace with a veth and a running process, the root FORWARD rule)
// and checks RemoveLeftovers removes all of it, twice in a row.
func TestRemoveLeftovers(t *testing.T) {
	SkipUnlessSupported(t)
	const prefix = "msjt"
	lock, err := tryLock(prefix)
	if err != nil || lock == nil {
		t.Skipf("lock for %s: %v", prefix, err)
	}
	defer lock.release()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := network{prefix: prefix, subnet: "10.77.250"}
	if err := RemoveLeftovers(ctx, prefix); err != nil {
		t.Fatal(err)
	}
	if err := n.setup(ctx, map[string]string{"n1": "10.77.250.11"}); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("ip", "netns", "exec", n.ns("n1"), "sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleep.Wait(); close(exited) }()

	for range 2 {
		if err := RemoveLeftovers(ctx, prefix); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the namespace survived")
	}
	nss, _ := run(ctx, "ip", "netns", "list")
	links, _ := run(ctx, "ip", "-o", "link", "show")
	fwd, _ := run(ctx, "iptables", "-w", "-S", "FORWARD")
	for what, out := range map[string]string{"namespaces": nss, "links": links, "FORWARD rules": fwd} {
		if strings.Contains(out, prefix+"-") {
			t.Errorf("%s left: %s", what, out)
		}
	}
}
