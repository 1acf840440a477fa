// Package browsertest tests the console (package ui) in a real browser:
// headless Chromium, driven with chromedp, against three metastore
// processes running the example job. It is a package of its own so that
// the browser driver is a dependency of this test only.
package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/internal/freeport"
)

var update = flag.Bool("update", false, "rewrite docs/console-job.png, the README's screenshot of the job view")

// chromium finds the browser: $METASTORE_CHROMIUM, else chromium on PATH
// (Debian's package installs /usr/bin/chromium).
func chromium() string {
	if p := os.Getenv("METASTORE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifacts is the directory the screenshots go to:
// $METASTORE_UI_ARTIFACTS, else a temporary directory of the test.
func artifacts(t *testing.T) string {
	dir := os.Getenv("METASTORE_UI_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cleanEnv is the environment without METASTORE_* variables.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "METASTORE_") {
			out = append(out, kv)
		}
	}
	return out
}

// freeAddr returns a loopback address for a process to bind: free now,
// outside the kernel's ephemeral range and never given twice
// (internal/freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t)
}

// waitFor polls cond until it returns nil or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		<-tick.C
	}
}

func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

type member struct {
	id, httpAddr string
	scheme       string
	cmd          *exec.Cmd
	stderr       *syncBuffer
}

func (m *member) url(path string) string { return m.scheme + "://" + m.httpAddr + path }

// startCluster starts three members on loopback, each with the serve
// flags extra(id) adds, serving scheme (http or https).
func startCluster(t *testing.T, bin, scheme string, extra func(id string) []string) []*member {
	t.Helper()
	var ms []*member
	var peers, raft []string
	for i := 1; i <= 3; i++ {
		ms = append(ms, &member{id: fmt.Sprintf("n%d", i), httpAddr: freeAddr(t), scheme: scheme})
		raft = append(raft, freeAddr(t))
		peers = append(peers, fmt.Sprintf("n%d=%s", i, raft[i-1]))
	}
	blobs := t.TempDir()
	for i, m := range ms {
		m.stderr = &syncBuffer{}
		m.cmd = exec.Command(bin, "serve", "--node-id", m.id, "--data-dir", filepath.Join(t.TempDir(), m.id),
			"--http-addr", m.httpAddr, "--raft-addr", raft[i], "--initial-cluster", strings.Join(peers, ","),
			"--blob-store", "file://"+blobs,
			"--heartbeat-timeout", "300ms", "--election-timeout", "300ms", "--leader-lease-timeout", "150ms",
			"--commit-timeout", "5ms", "--min-free-disk", "0", "--gc-interval", "1h")
		m.cmd.Args = append(m.cmd.Args, extra(m.id)...)
		m.cmd.Env = cleanEnv()
		m.cmd.Stdout = io.Discard
		m.cmd.Stderr = m.stderr
		if err := m.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", m.id, err)
		}
	}
	t.Cleanup(func() {
		for _, m := range ms {
			_ = m.cmd.Process.Kill()
			_ = m.cmd.Wait()
			if t.Failed() {
				s := m.stderr.String()
				t.Logf("--- %s stderr (last 4 KiB):\n%s", m.id, s[max(0, len(s)-4096):])
			}
		}
	})
	return ms
}

var httpClient = &http.Client{Timeout: 15 * time.Second}

// tlsClient trusts the CA of the cluster over https (TestConsoleOverTLS).
var tlsClient *http.Client

func clientFor(url string) *http.Client {
	if strings.HasPrefix(url, "https:") && tlsClient != nil {
		return tlsClient
	}
	return httpClient
}

// call sends a request with token and decodes a 200 answer into out.
func call(method, url, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := clientFor(url).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func runJob(t *testing.T, bin string, ms []*member, token string, args ...string) string {
	t.Helper()
	var addrs []string
	for _, m := range ms {
		addrs = append(addrs, m.url(""))
	}
	cmd := exec.Command(bin, append([]string{"--addr", strings.Join(addrs, ","), "--token", token}, args...)...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("streamjob %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// The API's answers, as far as the test compares them.
type apiJob struct {
	ID              string   `json:"id"`
	Generation      uint64   `json:"generation"`
	LastEpoch       uint64   `json:"last_epoch"`
	LatestCompleted uint64   `json:"latest_completed"`
	Pending         []uint64 `json:"pending"`
	Retained        []uint64 `json:"retained"`
	// Attempts that resumed from a checkpoint, counted from a generation.
	RestoredAttempts    uint64 `json:"restored_attempts"`
	RestoresCountedFrom uint64 `json:"restores_counted_from"`
}

// restoredText is what the console shows for a job's restored attempts.
func (j apiJob) restoredText() string {
	switch {
	case j.Generation == 0 || j.RestoresCountedFrom == 1:
		return fmt.Sprint(j.RestoredAttempts)
	case j.RestoresCountedFrom == 0:
		return "unknown"
	}
	return fmt.Sprintf("%d since generation %d", j.RestoredAttempts, j.RestoresCountedFrom)
}

type apiAttempt struct {
	Generation   uint64  `json:"generation"`
	AttemptID    string  `json:"attempt_id"`
	RestoredFrom *uint64 `json:"restored_from"`
	Tasks        int     `json:"tasks"`
	TaskList     []struct {
		ID   string   `json:"id"`
		Caps []string `json:"capabilities"`
	} `json:"task_list"`
}

// startedFrom is what the console shows for where an attempt started.
func (a apiAttempt) startedFrom() string {
	switch {
	case a.RestoredFrom == nil:
		return "unknown (not recorded)"
	case *a.RestoredFrom == 0:
		return "fresh start"
	}
	return fmt.Sprintf("restored from epoch %d", *a.RestoredFrom)
}

type apiEpoch struct {
	Epoch        uint64     `json:"epoch"`
	State        string     `json:"state"`
	BeganAt      time.Time  `json:"began_at"`
	CompletedAt  *time.Time `json:"completed_at"`
	EndedAt      *time.Time `json:"ended_at"`
	Reason       string     `json:"reason"`
	Acked        int        `json:"acked"`
	Expected     int        `json:"expected"`
	PayloadBytes int64      `json:"payload_bytes"`
	Stragglers   []string   `json:"stragglers"`
	Acks         []struct {
		Task    string `json:"task"`
		Delay   string `json:"delay"`
		Lineage uint64 `json:"lineage"`
	} `json:"acks"`
}

func (e apiEpoch) durationMs() float64 {
	end := e.CompletedAt
	if end == nil {
		end = e.EndedAt
	}
	return float64(end.Sub(e.BeganAt)) / float64(time.Millisecond)
}

// taskMetric reads the metric name of job from /metrics, by task.
func taskMetric(t *testing.T, base, token, name, job string) map[string]string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := clientFor(base).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, raw)
	}
	out := map[string]string{}
	prefix := name + `{job_id="` + job + `",task="`
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			task, value, _ := strings.Cut(rest, `"} `)
			out[task] = value
		}
	}
	return out
}

// consoleLog collects what the page writes to the console: calls of the
// console API, uncaught exceptions and browser log entries (failed loads,
// Content-Security-Policy violations).
type consoleLog struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func (c *consoleLog) add(m chromedp.ConsoleMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
}

// take returns the errors and exceptions since the last take, less those
// whose text contains one of allowed.
func (c *consoleLog) take(allowed ...string) []string {
	return c.takeExcept(func(m chromedp.ConsoleMessage) bool {
		return slices.ContainsFunc(allowed, func(a string) bool { return strings.Contains(m.Text, a) })
	})
}

// takeExcept returns the errors and exceptions since the last take, less
// those skip accepts.
func (c *consoleLog) takeExcept(skip func(chromedp.ConsoleMessage) bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException {
			continue
		}
		if skip(m) {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
	}
	c.msgs = nil
	return out
}

type browser struct {
	t        *testing.T
	ctx      context.Context
	log      *consoleLog
	shots    string
	base     string
	apiToken string
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until expr is true in the page.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		b.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// waitView waits until the view has drawn the element sel; an error the
// page shows instead fails the test with its text.
func (b *browser) waitView(what, sel string) {
	b.t.Helper()
	b.waitJS(what, `document.querySelector(`+jsString(sel)+`) !== null || document.getElementById('error') !== null`)
	if msg := eval[string](b, `(document.getElementById('error') || {}).textContent || ''`); msg != "" {
		b.screenshot("failed")
		b.t.Fatalf("%s: the page shows an error: %s", what, msg)
	}
}

// open navigates to a view and waits until the console has drawn it.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path))
	b.waitJS(path+" drawn", `document.querySelector('main[data-draws]') !== null || document.getElementById('error') !== null`)
}

// fields reads the text of the elements with a data-field under sel.
func (b *browser) fields(sel string) map[string]string {
	b.t.Helper()
	return eval[map[string]string](b, `(() => { const o = {}; document.querySelectorAll(`+jsString(sel+" [data-field]")+
		`).forEach((e) => { o[e.getAttribute('data-field')] = e.textContent.trim(); }); return o; })()`)
}

func jsString(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

func (b *browser) screenshot(name string) []byte {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return png
}

// noErrors fails on console errors since the last check.
func (b *browser) noErrors(view string, allowed ...string) {
	b.t.Helper()
	if errs := b.log.take(allowed...); len(errs) > 0 {
		b.t.Errorf("%s: console errors:\n  %s", view, strings.Join(errs, "\n  "))
	}
}

func (b *browser) useToken(token string) {
	b.t.Helper()
	b.do("type the token",
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("token-use")))
}

// newBrowser starts headless Chromium at chrome, with a fresh profile, on
// a tab whose console messages it collects; views open at base.
func newBrowser(t *testing.T, chrome, base string, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium %s: %v", chrome, err)
	}
	clog := &consoleLog{}
	consoleCtx, stopConsole := context.WithCancel(ctx)
	messages := chromedp.Console(consoleCtx)
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			clog.add(m)
		}
	}()
	t.Cleanup(func() {
		stopConsole()
		<-consoleDone
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	return &browser{t: t, ctx: ctx, log: clog, shots: artifacts(t), base: base}
}

// abortReason is the reason epoch 13 is aborted with: markup, which the
// console must show as text.
const abortReason = `gave up <b id="injected">bold</b><img src=x onerror="document.title='pwned'">`

// prepare skips the test in -short mode or without chromium, and builds
// the metastore and example job binaries: it returns the browser's path
// and the two binaries'.
func prepare(t *testing.T) (chrome, msBin, jobBin string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs three metastore processes and a browser")
	}
	chrome = chromium()
	if chrome == "" {
		t.Skip("no chromium: install Debian's chromium package (.ci/run does) or set METASTORE_CHROMIUM")
	}
	bins := t.TempDir()
	msBin = build(t, bins, "github.com/metastore/metastore/cmd/metastore")
	jobBin = build(t, bins, "github.com/metastore/metastore/examples/streamjob")
	return chrome, msBin, jobBin
}

// TestConsoleInBrowser opens every view of the console in headless
// Chromium against a three-member cluster with --auth that ran the example
// job, and checks that each view draws what the API answers without a
// console error, that the job view follows a new epoch by itself, and that
// the token stays in the tab. Screenshots of the views are saved (see
// artifacts); -update rewrites the README's screenshot of the job view.
func TestConsoleInBrowser(t *testing.T) {
	chrome, msBin, jobBin := prepare(t)

	op := api.GenerateToken()
	opFile := filepath.Join(t.TempDir(), "operator-token")
	if err := os.WriteFile(opFile, []byte(op+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ms := startCluster(t, msBin, "http", func(string) []string { return []string{"--auth", "--auth-bootstrap-token-file", opFile} })
	waitFor(t, 60*time.Second, "cluster with a leader and the operator token", func() error {
		leaders := map[string]bool{}
		for _, m := range ms {
			var st struct {
				LeaderID string `json:"leader_id"`
			}
			if err := call("GET", m.url("/v1/status"), op, nil, &st); err != nil {
				return err
			}
			leaders[st.LeaderID] = true
		}
		if len(leaders) != 1 || leaders[""] {
			return fmt.Errorf("leaders %v", leaders)
		}
		return nil
	})
	var created struct {
		Secret string `json:"secret"`
	}
	waitFor(t, 30*time.Second, "worker token", func() error {
		return call("POST", ms[0].url("/v1/tokens"), op, map[string]any{"role": "worker", "job": "demo"}, &created)
	})
	worker := created.Secret
	waitFor(t, 30*time.Second, "job other", func() error {
		return call("PUT", ms[0].url("/v1/jobs/other"), op, map[string]any{"config": map[string]any{}}, nil)
	})
	runJob(t, jobBin, ms, worker, "run", "--epochs", "12")

	// Every member serves the console.
	for _, m := range ms {
		resp, err := clientFor(m.url("")).Get(m.url("/ui/jobs/demo/epochs/1"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s /ui/: %d %s", m.id, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}

	start := time.Now()
	b := newBrowser(t, chrome, ms[1].url(""))
	t.Logf("screenshots in %s", b.shots)

	// Without a token the API answers 401 and the page asks for one.
	b.open("/ui/")
	if st := eval[string](b, `document.getElementById('error').getAttribute('data-status')`); st != "401" {
		t.Fatalf("without a token: error status %q", st)
	}
	b.noErrors("jobs without a token", "status of 401")

	// A worker token typed into the page sees its job only.
	b.useToken(worker)
	b.waitView("jobs table", "#jobs")
	var jobs struct {
		Jobs []apiJob `json:"jobs"`
	}
	if err := call("GET", b.base+"/v1/jobs", worker, nil, &jobs); err != nil {
		t.Fatal(err)
	}
	rows := eval[[]string](b, `Array.from(document.querySelectorAll('#jobs tr[data-job]')).map((r) => r.getAttribute('data-job'))`)
	if len(jobs.Jobs) != 1 || !slices.Equal(rows, []string{"demo"}) {
		t.Fatalf("worker's jobs: page %v, API %+v", rows, jobs.Jobs)
	}
	demo := jobs.Jobs[0]
	var epochs struct {
		Epochs []apiEpoch `json:"epochs"`
	}
	if err := call("GET", b.base+"/v1/jobs/demo/epochs", worker, nil, &epochs); err != nil {
		t.Fatal(err)
	}
	count := func(states ...string) int {
		n := 0
		for _, e := range epochs.Epochs {
			if slices.Contains(states, e.State) {
				n++
			}
		}
		return n
	}
	f := b.fields(`#jobs tr[data-job="demo"]`)
	want := map[string]string{
		"generation": fmt.Sprint(demo.Generation), "latest_completed": fmt.Sprint(demo.LatestCompleted),
		"pending": fmt.Sprint(len(demo.Pending)), "retained": fmt.Sprint(len(demo.Retained)),
		"completed": fmt.Sprint(count("completed", "subsumed")), "aborted": fmt.Sprint(count("aborted")),
		"restored": demo.restoredText(),
	}
	if demo.RestoredAttempts != 0 || demo.RestoresCountedFrom != 1 {
		t.Errorf("the example job's first run: %d restored attempts counted from generation %d, want 0 from 1", demo.RestoredAttempts, demo.RestoresCountedFrom)
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("jobs view, %s: %q, API %q", k, f[k], v)
		}
	}
	if demo.LatestCompleted != 12 || !slices.Equal(demo.Pending, []uint64{13}) {
		t.Fatalf("the example job left %+v, want 12 completed and 13 pending", demo)
	}
	b.screenshot("jobs")
	b.noErrors("jobs")

	// The open jobs view follows a change of the job by itself: epoch 13,
	// left pending by the crash, is aborted (with a reason that is markup:
	// the views must show it as text).
	eval[string](b, `window.consoleTestMarker = 'still here'`)
	if err := call("POST", b.base+"/v1/jobs/demo/epochs/13/abort", worker, map[string]any{"generation": demo.Generation, "reason": abortReason}, nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the jobs view to show the abort", `(() => {
		const row = document.querySelector('#jobs tr[data-job="demo"]');
		return row !== null && row.querySelector('[data-field="pending"]').textContent === '0' &&
			row.querySelector('[data-field="aborted"]').textContent === '1'; })()`)
	if m := eval[string](b, `window.consoleTestMarker || 'reloaded'`); m != "still here" {
		t.Fatalf("the jobs view was reloaded (%s), not updated", m)
	}
	b.noErrors("jobs after the abort")

	// The token is in the tab's sessionStorage, never in a URL.
	if got := eval[string](b, `sessionStorage.getItem('metastore-token')`); got != worker {
		t.Errorf("sessionStorage holds %q", got)
	}
	urls := eval[[]string](b, `[location.href].concat(performance.getEntriesByType('resource').map((e) => e.name))`)
	for _, u := range urls {
		if strings.Contains(u, worker) {
			t.Errorf("the token is in the URL %s", u)
		}
	}

	// The job view draws the checkpoint history as the API reports it.
	b.open("/ui/jobs/demo")
	b.waitView("job view", `svg[data-chart="duration"]`)
	checkJob := func(view string) {
		t.Helper()
		var j apiJob
		if err := call("GET", b.base+"/v1/jobs/demo", worker, nil, &j); err != nil {
			t.Fatal(err)
		}
		if err := call("GET", b.base+"/v1/jobs/demo/epochs", worker, nil, &epochs); err != nil {
			t.Fatal(err)
		}
		f := b.fields(".card")
		join := func(ns []uint64, none string) string {
			if len(ns) == 0 {
				return none
			}
			var s []string
			for _, n := range ns {
				s = append(s, fmt.Sprint(n))
			}
			return strings.Join(s, ", ")
		}
		for k, v := range map[string]string{"generation": fmt.Sprint(j.Generation), "latest_completed": fmt.Sprint(j.LatestCompleted),
			"last_epoch": fmt.Sprint(j.LastEpoch), "pending": join(j.Pending, "none"), "retained": join(j.Retained, "none"),
			"restored": j.restoredText()} {
			if f[k] != v {
				t.Errorf("%s, %s: %q, API %q", view, k, f[k], v)
			}
		}
		type bar struct {
			Epoch uint64  `json:"epoch"`
			Class string  `json:"class"`
			Value float64 `json:"value"`
		}
		barsOf := func(chart string) []bar {
			return eval[[]bar](b, `Array.from(document.querySelectorAll('svg[data-chart="`+chart+`"] rect[data-epoch]')).map((r) => ({
				epoch: Number(r.getAttribute('data-epoch')), class: r.getAttribute('class'), value: Number(r.getAttribute('data-value')) }))`)
		}
		durations, sizes := barsOf("duration"), barsOf("size")
		if len(durations) != len(epochs.Epochs) || len(sizes) != len(epochs.Epochs) {
			t.Fatalf("%s: %d duration and %d size bars for %d epochs", view, len(durations), len(sizes), len(epochs.Epochs))
		}
		for i, e := range epochs.Epochs {
			d, s := durations[i], sizes[i]
			if d.Epoch != e.Epoch || d.Class != "bar-"+e.State || s.Value != float64(e.PayloadBytes) {
				t.Errorf("%s, epoch %d (%s, %d bytes): bars %+v %+v", view, e.Epoch, e.State, e.PayloadBytes, d, s)
			}
			if e.State != "pending" && math.Abs(d.Value-e.durationMs()) > 1 {
				t.Errorf("%s, epoch %d: duration %.3fms, API %.3fms", view, e.Epoch, d.Value, e.durationMs())
			}
		}
	}
	// checkAttempts compares the page's attempts (newest first, where
	// each started from, each task set with its capability flags, closed)
	// with the API's, and answers the API's.
	checkAttempts := func(view string) []apiAttempt {
		t.Helper()
		var list struct {
			Attempts []apiAttempt `json:"attempts"`
		}
		if err := call("GET", b.base+"/v1/jobs/demo/attempts", worker, nil, &list); err != nil {
			t.Fatal(err)
		}
		type pageAttempt struct {
			Generation string            `json:"generation"`
			From       string            `json:"from"`
			Epoch      string            `json:"epoch"`
			Tasks      string            `json:"tasks"`
			Open       bool              `json:"open"`
			TaskSet    map[string]string `json:"taskset"`
		}
		rows := eval[[]pageAttempt](b, `Array.from(document.querySelectorAll('#attempts > tbody > tr[data-generation]')).map((r) => {
			const from = r.querySelector('[data-field="restored_from"]');
			const d = r.querySelector('details.taskset');
			return { generation: r.getAttribute('data-generation'), from: from.textContent.trim(), epoch: from.getAttribute('data-epoch') || '',
				tasks: r.querySelector('[data-field="tasks"]').textContent, open: d.open,
				taskset: Object.fromEntries(Array.from(d.querySelectorAll('tr[data-task]')).map((t) =>
					[t.getAttribute('data-task'), Array.from(t.querySelectorAll('.tag')).map((c) => c.textContent).join(',')])) }; })`)
		if len(rows) != len(list.Attempts) || len(rows) == 0 {
			t.Fatalf("%s: %d attempts on the page, API %d", view, len(rows), len(list.Attempts))
		}
		for i, a := range list.Attempts {
			var d apiAttempt
			if err := call("GET", fmt.Sprintf("%s/v1/jobs/demo/attempts/%d", b.base, a.Generation), worker, nil, &d); err != nil {
				t.Fatal(err)
			}
			list.Attempts[i] = d
			r := rows[i]
			epoch := ""
			if d.RestoredFrom != nil {
				epoch = fmt.Sprint(*d.RestoredFrom)
			}
			if r.Generation != fmt.Sprint(d.Generation) || r.From != d.startedFrom() || r.Epoch != epoch || r.Tasks != fmt.Sprint(d.Tasks) || r.Open {
				t.Errorf("%s, attempt %d: page %+v, API %+v (restored from %s)", view, d.Generation, r, d, epoch)
			}
			want := map[string]string{}
			for _, tk := range d.TaskList {
				want[tk.ID] = strings.Join(tk.Caps, ",")
			}
			if !maps.Equal(r.TaskSet, want) || len(want) != d.Tasks {
				t.Errorf("%s, task set of generation %d: page %v, API %v", view, d.Generation, r.TaskSet, want)
			}
		}
		return list.Attempts
	}
	checkJob("job view")
	if kept := checkAttempts("job view"); len(kept) != 1 || kept[0].startedFrom() != "fresh start" {
		t.Errorf("job view: attempts %+v, want the first run's, a fresh start", kept)
	}
	tasks := eval[map[string]string](b, `Object.fromEntries(Array.from(document.querySelectorAll('#tasks tr[data-task]')).map((r) =>
		[r.getAttribute('data-task'), r.querySelector('[data-field="asked"]').textContent]))`)
	if len(tasks) != 6 || !strings.HasPrefix(tasks["map-0"], "no") || tasks["agg-0"] != "yes" {
		t.Errorf("job view, tasks: %v", tasks)
	}
	b.screenshot("job")
	b.noErrors("job")

	// A new attempt completes two more epochs: the open job
	// view follows by itself (no reload: the marker survives).
	draws := eval[string](b, `window.consoleTestMarker = 'still here'; document.querySelector('main').getAttribute('data-draws')`)
	runJob(t, jobBin, ms, worker, "resume", "--epochs", "2")
	var after apiJob
	if err := call("GET", b.base+"/v1/jobs/demo", worker, nil, &after); err != nil {
		t.Fatal(err)
	}
	if after.LatestCompleted <= 12 {
		t.Fatalf("after resume: %+v", after)
	}
	b.waitJS("the job view to show the new checkpoint", `(() => {
		const f = document.querySelector('.card [data-field="latest_completed"]');
		const aborted = document.querySelector('svg[data-chart="duration"] rect[data-epoch="13"]');
		return f !== null && f.textContent.trim() === '`+fmt.Sprint(after.LatestCompleted)+`' &&
			aborted !== null && aborted.getAttribute('class') === 'bar-aborted'; })()`)
	if m := eval[string](b, `window.consoleTestMarker || 'reloaded'`); m != "still here" {
		t.Fatalf("the job view was reloaded (%s), not updated", m)
	}
	if d := eval[string](b, `document.querySelector('main').getAttribute('data-draws')`); d == draws {
		t.Fatalf("data-draws still %s", d)
	}
	checkJob("job view after resume")
	if after.RestoredAttempts != 1 {
		t.Errorf("after resume: %d restored attempts, want 1", after.RestoredAttempts)
	}
	if kept := checkAttempts("job view after resume"); len(kept) == 0 || kept[0].startedFrom() != fmt.Sprintf("restored from epoch %d", demo.LatestCompleted) {
		t.Errorf("job view after resume: attempts %+v, want the newest restored from epoch %d", kept, demo.LatestCompleted)
	}
	if got := eval[string](b, `document.querySelector('tr[data-aborted="13"] [data-field="reason"]').textContent`); got != abortReason ||
		eval[int](b, `document.querySelectorAll('#injected, img').length`) != 0 {
		t.Errorf("job view: the abort reason is shown as %q, or became markup", got)
	}
	png := b.screenshot("job-updated")
	if *update {
		if err := os.WriteFile("../../docs/console-job.png", png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("rewrote docs/console-job.png")
	}
	// The job runs on while the view draws: a kept epoch subsumed between
	// the epoch listing and its manifest reads answers 409, which Chromium
	// logs as a failed load; the view leaves that epoch out of its table.
	// Only that load is let through: a 409 elsewhere, or any other failure
	// of a manifest read, is still an error.
	if errs := b.log.takeExcept(func(m chromedp.ConsoleMessage) bool {
		return strings.Contains(m.Text, "status of 409 (Conflict)") && strings.Contains(m.URL, "/manifests/")
	}); len(errs) > 0 {
		t.Errorf("job after resume: console errors:\n  %s", strings.Join(errs, "\n  "))
	}

	// A savepoint, and the restore preview from it: per task, what the
	// API's restore plan says it reads and costs.
	if err := call("PUT", fmt.Sprintf("%s/v1/jobs/demo/epochs/%d/pin", b.base, after.LatestCompleted), op, map[string]any{"name": "before-upgrade"}, nil); err != nil {
		t.Fatal(err)
	}
	b.open("/ui/jobs/demo?pin=before-upgrade")
	b.waitView("restore preview", "#restore-plan")
	if pins := eval[map[string]string](b, `Object.fromEntries(Array.from(document.querySelectorAll('#pins tr[data-pin]')).map((r) =>
		[r.getAttribute('data-pin'), r.querySelector('[data-field="name"]').textContent]))`); len(pins) != 1 || pins[fmt.Sprint(after.LatestCompleted)] != "before-upgrade" {
		t.Errorf("job view, savepoints: %v", pins)
	}
	type planRow struct {
		Status string `json:"status"`
		Reads  string `json:"reads"`
		Bytes  string `json:"bytes"`
	}
	planRows := eval[map[string]planRow](b, `Object.fromEntries(Array.from(document.querySelectorAll('#restore-plan tr[data-task]')).map((r) =>
		[r.getAttribute('data-task'), { status: r.querySelector('[data-field="status"]').textContent,
		  reads: r.querySelector('[data-field="object_store_reads"]').textContent,
		  bytes: r.querySelector('[data-field="object_store_bytes"]').getAttribute('data-bytes') }]))`)
	if len(planRows) != 6 {
		t.Errorf("restore preview: %d tasks, want 6", len(planRows))
	}
	var totalReads int
	for task, row := range planRows {
		var plan struct {
			Status string `json:"status"`
			Source struct {
				Epoch uint64 `json:"epoch"`
			} `json:"source"`
			Reads int    `json:"object_store_reads"`
			Bytes uint64 `json:"object_store_bytes"`
		}
		if err := call("GET", b.base+"/v1/jobs/demo/tasks/"+task+"/restore?pin=before-upgrade", worker, nil, &plan); err != nil {
			t.Fatal(err)
		}
		if row.Status != plan.Status || row.Reads != fmt.Sprint(plan.Reads) || row.Bytes != fmt.Sprint(plan.Bytes) || plan.Source.Epoch != after.LatestCompleted {
			t.Errorf("restore preview, %s: %+v, API %+v", task, row, plan)
		}
		totalReads += plan.Reads
	}
	if total := eval[string](b, `document.querySelector('#restore-plan tr[data-total] [data-field="object_store_reads"]').textContent`); totalReads == 0 || total != fmt.Sprint(totalReads) {
		t.Errorf("restore preview: %s object-store reads in all, API %d", total, totalReads)
	}
	b.screenshot("job-restore-preview")
	b.noErrors("restore preview")

	// The epoch view of the latest checkpoint: each expected task's ack
	// delay as the API reports it, map-0 not asked.
	var e apiEpoch
	if err := call("GET", fmt.Sprintf("%s/v1/jobs/demo/epochs/%d", b.base, after.LatestCompleted), worker, nil, &e); err != nil {
		t.Fatal(err)
	}
	b.open(fmt.Sprintf("/ui/jobs/demo/epochs/%d", after.LatestCompleted))
	b.waitView("epoch view", "#acks")
	type ackRow struct {
		Delay string `json:"delay"`
		Bytes string `json:"bytes"`
	}
	acks := eval[map[string]ackRow](b, `Object.fromEntries(Array.from(document.querySelectorAll('#acks tr[data-task]')).map((r) =>
		[r.getAttribute('data-task'), { delay: r.querySelector('[data-field="delay"]').textContent,
		  bytes: r.querySelector('[data-field="blob_bytes"]').getAttribute('data-bytes') || '' }]))`)
	if len(acks) != len(e.Acks) || len(e.Acks) != 5 {
		t.Errorf("epoch view: %d ack rows, API %d acks", len(acks), len(e.Acks))
	}
	for _, a := range e.Acks {
		row := acks[a.Task]
		if row.Delay != a.Delay {
			t.Errorf("epoch view, %s: delay %q, API %q", a.Task, row.Delay, a.Delay)
		}
		if a.Lineage != 0 {
			var m struct {
				Bytes int64 `json:"bytes"`
			}
			if err := call("GET", fmt.Sprintf("%s/v1/jobs/demo/epochs/%d/manifests/%s", b.base, e.Epoch, a.Task), worker, nil, &m); err != nil {
				t.Fatal(err)
			}
			if row.Bytes != fmt.Sprint(m.Bytes) {
				t.Errorf("epoch view, %s: blob bytes %q, API %d", a.Task, row.Bytes, m.Bytes)
			}
		} else if row.Bytes != "" {
			t.Errorf("epoch view, %s: blob bytes %q for an ack without a manifest", a.Task, row.Bytes)
		}
	}
	if f := b.fields(".card"); f["state"] != "completed" || f["acked"] != fmt.Sprintf("%d of %d", e.Acked, e.Expected) || f["stragglers"] != "none" {
		t.Errorf("epoch view: %v", f)
	}
	notAsked := eval[[]string](b, `Array.from(document.querySelectorAll('#not-asked li[data-task]')).map((li) => li.getAttribute('data-task'))`)
	if !slices.Equal(notAsked, []string{"map-0"}) {
		t.Errorf("epoch view, tasks not asked: %v", notAsked)
	}
	bars := eval[int](b, `document.querySelectorAll('svg[data-chart="acks"] rect[data-task]').length`)
	if bars != 5 {
		t.Errorf("epoch view: %d ack bars", bars)
	}
	b.screenshot("epoch")
	b.noErrors("epoch")

	// From the epoch view, the restore preview from that checkpoint.
	if _, err := chromedp.Run(b.ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.ID("restore-epoch")))); err != nil {
		t.Fatalf("follow the restore link: %v", err)
	}
	b.waitView("restore preview from the epoch", "#restore-plan")
	if src := eval[string](b, `document.getElementById('restore-source').textContent`); !strings.Contains(src, fmt.Sprintf("epoch %d ", e.Epoch)) {
		t.Errorf("restore preview from epoch %d: %q", e.Epoch, src)
	}
	b.noErrors("restore preview from the epoch")

	// The aborted epoch 13 of the superseded attempt: its reason, and
	// that three tasks never acknowledged.
	if err := call("GET", b.base+"/v1/jobs/demo/epochs/13", worker, nil, &e); err != nil {
		t.Fatal(err)
	}
	b.open("/ui/jobs/demo/epochs/13")
	b.waitView("aborted epoch view", "#acks")
	if n := eval[int](b, `document.querySelectorAll('#injected').length`); n != 0 || e.Reason != abortReason {
		t.Errorf("epoch 13: the reason %q became markup (%d elements)", e.Reason, n)
	}
	if f := b.fields(".card"); e.State != "aborted" || f["state"] != "aborted" || f["reason"] != e.Reason || e.Reason == "" ||
		f["acked"] != fmt.Sprintf("%d of %d", e.Acked, e.Expected) || !strings.HasPrefix(f["stragglers"], fmt.Sprintf("%d tasks", e.Expected-e.Acked)) {
		t.Errorf("epoch 13: %v, API %+v", f, e)
	}
	b.screenshot("epoch-aborted")
	b.noErrors("aborted epoch")

	// A pending epoch: the stragglers are drawn as such, and the open view
	// follows the acks that complete it.
	next := after.LastEpoch + 1
	var attempt struct {
		Generation uint64 `json:"generation"`
	}
	if err := call("GET", b.base+"/v1/jobs/demo/attempts/current", worker, nil, &attempt); err != nil {
		t.Fatal(err)
	}
	if err := call("POST", b.base+"/v1/jobs/demo/epochs", worker, map[string]any{"generation": attempt.Generation, "epoch": next}, nil); err != nil {
		t.Fatal(err)
	}
	ack := func(task, kind string) {
		t.Helper()
		body := map[string]any{"generation": attempt.Generation, "payloads": map[string][]byte{kind: []byte(task + "-at-" + fmt.Sprint(next))}}
		if err := call("PUT", fmt.Sprintf("%s/v1/jobs/demo/epochs/%d/acks/%s", b.base, next, task), worker, body, nil); err != nil {
			t.Fatal(err)
		}
	}
	ack("source-0", "input")
	ack("source-1", "input")
	ack("sink-0", "output")
	if err := call("GET", fmt.Sprintf("%s/v1/jobs/demo/epochs/%d", b.base, next), worker, nil, &e); err != nil {
		t.Fatal(err)
	}
	b.open(fmt.Sprintf("/ui/jobs/demo/epochs/%d", next))
	b.waitView("pending epoch view", "#acks")
	strag := eval[[]string](b, `Array.from(document.querySelectorAll('svg[data-chart="acks"] rect[data-kind="straggler"]')).map((r) => r.getAttribute('data-task'))`)
	slices.Sort(strag)
	if e.State != "pending" || !slices.Equal(e.Stragglers, []string{"agg-0", "agg-1"}) || !slices.Equal(strag, e.Stragglers) {
		t.Errorf("pending epoch %d (%s): stragglers drawn %v, API %v", next, e.State, strag, e.Stragglers)
	}
	if f := b.fields(".card"); f["state"] != "pending" || f["stragglers"] != "agg-0, agg-1" {
		t.Errorf("pending epoch %d: %v", next, f)
	}
	b.screenshot("epoch-pending")
	ack("agg-0", "state")
	ack("agg-1", "state")
	b.waitJS("the epoch view to show the completion", `(() => {
		const f = document.querySelector('.card [data-field="state"]');
		return f !== null && f.textContent.trim() === 'completed' &&
			document.querySelectorAll('svg[data-chart="acks"] rect[data-kind="straggler"]').length === 0; })()`)
	b.screenshot("epoch-completed")
	b.noErrors("pending epoch")

	// Late tasks over time: the aggregations acknowledged the last epoch
	// long after the others. The job view counts the late acks per task as
	// the metric metastore_task_late_epochs does.
	b.open("/ui/jobs/demo")
	b.waitView("late tasks", "#late")
	pageLate := eval[map[string]string](b, `Object.fromEntries(Array.from(document.querySelectorAll('#late [data-late-count]')).map((e) =>
		[e.getAttribute('data-late-count'), e.textContent.split(' ')[0]]))`)
	metricLate := taskMetric(t, b.base, op, "metastore_task_late_epochs", "demo")
	for task, n := range pageLate {
		if want := metricLate[task]; n != want && !(n == "0" && want == "") {
			t.Errorf("late tasks, %s: page %s, metric %q", task, n, want)
		}
	}
	for task := range metricLate {
		if _, ok := pageLate[task]; !ok {
			t.Errorf("late tasks: %s is in the metric, not on the page", task)
		}
	}
	if metricLate["agg-0"] == "" || metricLate["agg-1"] == "" {
		t.Errorf("late tasks: the aggregations' late ack of epoch %d is not counted: page %v, metric %v", next, pageLate, metricLate)
	}
	b.screenshot("job-late-tasks")
	b.noErrors("late tasks")

	// The changelog trade-off of the latest checkpoint, as its metrics say.
	type clRow struct {
		Restore   string `json:"restore"`
		Changelog string `json:"changelog"`
		Uploaded  string `json:"uploaded"`
	}
	cl := eval[map[string]clRow](b, `Object.fromEntries(Array.from(document.querySelectorAll('#changelog tr[data-epoch="`+fmt.Sprint(next)+`"]')).map((r) =>
		[r.getAttribute('data-task'), { restore: r.querySelector('[data-field="restore_bytes"]').getAttribute('data-bytes'),
		  changelog: r.querySelector('[data-field="changelog_bytes"]').getAttribute('data-bytes'),
		  uploaded: r.querySelector('[data-field="uploaded"]').getAttribute('data-bytes') || '' }]))`)
	restoreBytes := taskMetric(t, b.base, op, "metastore_task_restore_bytes", "demo")
	changelogBytes := taskMetric(t, b.base, op, "metastore_task_changelog_bytes", "demo")
	if len(cl) != 2 || len(restoreBytes) != 2 {
		t.Errorf("changelog trade-off of epoch %d: page %v, metric %v", next, cl, restoreBytes)
	}
	for task, row := range cl {
		if row.Restore != restoreBytes[task] || row.Changelog != changelogBytes[task] {
			t.Errorf("changelog trade-off, %s: page %+v, metrics restore %s changelog %s", task, row, restoreBytes[task], changelogBytes[task])
		}
	}

	// A new attempt with another task set (sink-0 gains state), started
	// while the job view is open: the view follows, counts a second
	// restored attempt and keeps the superseded attempt's task set (its
	// retained and pinned epochs belong to it).
	var cur apiAttempt
	if err := call("GET", b.base+"/v1/jobs/demo/attempts/current", worker, nil, &cur); err != nil {
		t.Fatal(err)
	}
	var restart []map[string]any
	for _, tk := range cur.TaskList {
		caps := tk.Caps
		if tk.ID == "sink-0" {
			caps = []string{"state", "output"}
		}
		restart = append(restart, map[string]any{"id": tk.ID, "capabilities": caps})
	}
	var before apiJob
	if err := call("GET", b.base+"/v1/jobs/demo", worker, nil, &before); err != nil {
		t.Fatal(err)
	}
	var third apiAttempt
	if err := call("POST", b.base+"/v1/jobs/demo/attempts", worker, map[string]any{"attempt_id": "console-restart", "tasks": restart}, &third); err != nil {
		t.Fatal(err)
	}
	if third.RestoredFrom == nil || *third.RestoredFrom != before.LatestCompleted {
		t.Fatalf("the third attempt: %+v, want restored from %d", third, before.LatestCompleted)
	}
	b.waitJS("the job view to show the third attempt", `document.querySelectorAll('#attempts > tbody > tr[data-generation]').length === 2 &&
		document.querySelector('#attempts > tbody > tr').getAttribute('data-generation') === '`+fmt.Sprint(third.Generation)+`'`)
	checkJob("job view after a third attempt")
	kept := checkAttempts("job view after a third attempt")
	if len(kept) != 2 || kept[1].Generation != cur.Generation {
		t.Errorf("job view after a third attempt: attempts %+v, want generations %d and %d", kept, third.Generation, cur.Generation)
	}
	if f := b.fields(".card"); f["restored"] != "2" {
		t.Errorf("job view after a third attempt: restored attempts %q, want 2", f["restored"])
	}
	// A task set the operator opens stays open when the view redraws (an
	// epoch of the new attempt begins).
	eval[bool](b, `(() => { document.querySelector('details.taskset[data-generation="`+fmt.Sprint(cur.Generation)+`"] summary').click(); return true; })()`)
	draws = eval[string](b, `document.querySelector('main').getAttribute('data-draws')`)
	var latest apiJob
	if err := call("GET", b.base+"/v1/jobs/demo", worker, nil, &latest); err != nil {
		t.Fatal(err)
	}
	if err := call("POST", b.base+"/v1/jobs/demo/epochs", worker, map[string]any{"generation": third.Generation, "epoch": latest.LastEpoch + 1}, nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the job view to redraw with the opened task set", `document.querySelector('main').getAttribute('data-draws') !== '`+draws+`' &&
		document.querySelector('details.taskset[data-generation="`+fmt.Sprint(cur.Generation)+`"]').open &&
		!document.querySelector('details.taskset[data-generation="`+fmt.Sprint(third.Generation)+`"]').open`)
	b.screenshot("job-attempts")
	b.noErrors("job after a third attempt")

	// The collector is the operator's: the worker token is refused, the
	// operator's token typed in shows it.
	b.open("/ui/gc")
	if st := eval[string](b, `document.getElementById('error').getAttribute('data-status')`); st != "403" {
		t.Fatalf("gc with a worker token: error status %q", st)
	}
	b.noErrors("gc with a worker token", "status of 403")
	for i := 0; i < 3; i++ {
		if err := call("POST", b.base+"/v1/gc/run", op, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	var gcStatus struct {
		RecentRuns []struct {
			BytesFreed uint64 `json:"bytes_freed"`
		} `json:"recent_runs"`
	}
	if err := call("GET", b.base+"/v1/gc", op, nil, &gcStatus); err != nil {
		t.Fatal(err)
	}
	b.useToken(op)
	b.waitView("gc view", "#blobs")
	runs := eval[[]string](b, `Array.from(document.querySelectorAll('#gc-chart rect[data-run]')).map((r) => r.getAttribute('data-bytes-freed'))`)
	if len(runs) < 3 || len(runs) != len(gcStatus.RecentRuns) {
		t.Errorf("gc view: %d cycles drawn, API %d", len(runs), len(gcStatus.RecentRuns))
	} else {
		for i, r := range gcStatus.RecentRuns {
			if runs[i] != fmt.Sprint(r.BytesFreed) {
				t.Errorf("gc view, cycle %d: %s bytes freed, API %d", i, runs[i], r.BytesFreed)
			}
		}
	}
	var blobs struct {
		Store string `json:"store"`
		Blobs struct {
			Count     map[string]int `json:"count"`
			LiveByJob map[string]struct {
				Count int    `json:"count"`
				Bytes uint64 `json:"bytes"`
			} `json:"live_by_job"`
		} `json:"blobs"`
	}
	if err := call("GET", b.base+"/v1/blobs", op, nil, &blobs); err != nil {
		t.Fatal(err)
	}
	live := eval[string](b, `(document.querySelector('#blobs tr[data-blob-state="live"] [data-field="count"]') || {}).textContent || ''`)
	if blobs.Blobs.Count["live"] == 0 || live != fmt.Sprint(blobs.Blobs.Count["live"]) {
		t.Errorf("gc view: %q live blobs, API %d", live, blobs.Blobs.Count["live"])
	}
	byJob := eval[map[string]string](b, `Object.fromEntries(Array.from(document.querySelectorAll('#live-by-job tr[data-job]')).map((r) =>
		[r.getAttribute('data-job'), r.querySelector('[data-field="count"]').textContent + ' ' + r.querySelector('[data-field="bytes"]').getAttribute('data-bytes')]))`)
	if demoBlobs := blobs.Blobs.LiveByJob["demo"]; len(byJob) != len(blobs.Blobs.LiveByJob) || demoBlobs.Count == 0 ||
		byJob["demo"] != fmt.Sprintf("%d %d", demoBlobs.Count, demoBlobs.Bytes) {
		t.Errorf("gc view, live bytes by job: %v, API %+v", byJob, blobs.Blobs.LiveByJob)
	}
	if f := b.fields(".card"); f["store"] != blobs.Store {
		t.Errorf("gc view: store %q, API %q", f["store"], blobs.Store)
	}
	b.screenshot("gc")
	b.noErrors("gc")

	// The cluster view: this member (n2) and the three members.
	var st struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		LeaderID string `json:"leader_id"`
		Term     uint64 `json:"term"`
	}
	if err := call("GET", b.base+"/v1/status", op, nil, &st); err != nil {
		t.Fatal(err)
	}
	b.open("/ui/cluster")
	b.waitView("cluster view", "#members")
	f = b.fields(".card")
	if f["state"] != st.State || f["leader_id"] != st.LeaderID || f["term"] != fmt.Sprint(st.Term) || f["health"] != "ready" {
		t.Errorf("cluster view: %v, API %+v", f, st)
	}
	if id := eval[string](b, `document.querySelector('[data-field="id"]').textContent`); id != "n2" {
		t.Errorf("cluster view of %s", id)
	}
	members := eval[map[string]string](b, `Object.fromEntries(Array.from(document.querySelectorAll('#members tr[data-member]')).map((r) =>
		[r.getAttribute('data-member'), r.querySelector('[data-field="leader"]').textContent]))`)
	if len(members) != 3 || members[st.LeaderID] != "leader" {
		t.Errorf("cluster view, members: %v (leader %s)", members, st.LeaderID)
	}
	rowsOf := eval[map[string]map[string]string](b, `Object.fromEntries(Array.from(document.querySelectorAll('#members tr[data-member]')).map((r) =>
		[r.getAttribute('data-member'), Object.fromEntries(Array.from(r.querySelectorAll('[data-field]')).map((e) => [e.getAttribute('data-field'), e.textContent]))]))`)
	for _, m := range ms {
		var own struct {
			State string `json:"state"`
			Term  uint64 `json:"term"`
		}
		if err := call("GET", m.url("/v1/status"), op, nil, &own); err != nil {
			t.Fatal(err)
		}
		if r := rowsOf[m.id]; r["state"] != own.State || r["term"] != fmt.Sprint(own.Term) || !strings.HasPrefix(r["answer"], "in ") {
			t.Errorf("cluster view, %s: %v, its status %+v", m.id, r, own)
		}
	}
	changes := eval[[]string](b, `Array.from(document.querySelectorAll('#leader-changes tr[data-term] [data-field="leader_id"]')).map((e) => e.textContent)`)
	if len(changes) == 0 || changes[0] != st.LeaderID {
		t.Errorf("cluster view, leadership changes: %v (leader %s)", changes, st.LeaderID)
	}
	if st.State != "leader" && (f["last_contact"] == "" || f["last_contact"] == "none yet") {
		t.Errorf("cluster view of a follower: last contact %q", f["last_contact"])
	}
	b.screenshot("cluster")
	b.noErrors("cluster")

	// No member logged a token.
	for _, m := range ms {
		if s := m.stderr.String(); strings.Contains(s, op) || strings.Contains(s, worker) {
			t.Errorf("%s logged a token", m.id)
		}
	}
	t.Logf("browser part: %s", time.Since(start).Round(time.Millisecond))
}
