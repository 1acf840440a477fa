package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// The operator files in deploy/ (see deploy/README.md).
var (
	deployDir       = filepath.Join("..", "..", "deploy")
	alertRulesFile  = filepath.Join(deployDir, "prometheus", "metastore-alerts.yml")
	alertTestsFile  = filepath.Join(deployDir, "prometheus", "metastore-alerts.test.yml")
	dashboardFile   = filepath.Join(deployDir, "grafana", "metastore-dashboard.json")
	systemdUnitFile = filepath.Join(deployDir, "systemd", "metastore.service")
	systemdEnvFile  = filepath.Join(deployDir, "systemd", "metastore.env")
	containerFile   = filepath.Join(deployDir, "Containerfile")
)

// runTool runs an external checker and returns its combined output.
func runTool(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// alertExprs returns the expr of every rule in the alert rules file (a
// one-line expr or a block scalar, "expr: |").
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	lines := strings.Split(string(raw), "\n")
	alert := ""
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if name, ok := strings.CutPrefix(trimmed, "- alert:"); ok {
			alert = strings.TrimSpace(name)
			continue
		}
		expr, ok := strings.CutPrefix(trimmed, "expr:")
		if !ok {
			continue
		}
		expr = strings.TrimSpace(expr)
		if expr == "|" {
			indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
			var block []string
			for i+1 < len(lines) {
				next := lines[i+1]
				if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= indent {
					break
				}
				block = append(block, strings.TrimSpace(next))
				i++
			}
			expr = strings.TrimSpace(strings.Join(block, " "))
		}
		if alert == "" || expr == "" {
			t.Fatalf("%s line %d: an expr outside an alert rule, or empty", alertRulesFile, i+1)
		}
		out[alert] = expr
	}
	if len(out) == 0 {
		t.Fatalf("%s: no alert rules found", alertRulesFile)
	}
	return out
}

// dashboardExprs returns every PromQL query of the dashboard: the panels'
// targets and the template variables' queries.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out[p.Title+" "+tg.RefID] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			out["variable "+v.Name] = v.Query
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no queries found", dashboardFile)
	}
	return out
}

// metricNameRE finds the metric names in a PromQL expression: metastore's
// own, the Go and process collectors', and Prometheus's up.
var metricNameRE = regexp.MustCompile(`\b(?:(?:metastore|go|process)_[a-z0-9_]+|up)\b`)

// metricFamily strips the series suffixes of histograms and summaries.
func metricFamily(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, s); ok {
			return f
		}
	}
	return name
}

// deployMetricNames maps every metric family the dashboard and the alert
// rules query to the queries that use it.
func deployMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	add := func(where string, exprs map[string]string) {
		for what, expr := range exprs {
			for _, n := range metricNameRE.FindAllString(expr, -1) {
				f := metricFamily(n)
				names[f] = append(names[f], where+" "+what)
			}
		}
	}
	add("alert", alertExprs(t))
	add("dashboard", dashboardExprs(t))
	return names
}

// documentedMetrics returns the metric families named in backquotes in
// docs/operations.md.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, span := range regexp.MustCompile("`[^`\n]+`").FindAllString(string(raw), -1) {
		for _, n := range metricNameRE.FindAllString(span, -1) {
			out[metricFamily(n)] = true
		}
	}
	return out
}

// liveFamilies returns the metric families of a /metrics answer.
func liveFamilies(exposition []byte) map[string]bool {
	out := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(exposition))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if f, ok := strings.CutPrefix(sc.Text(), "# TYPE "); ok {
			out[strings.Fields(f)[0]] = true
		}
	}
	return out
}

// checkDeployMetricNames fails for every metric the dashboard or the alert
// rules query that neither the live members expose nor docs/operations.md
// documents (series that exist only on a TLS member, after a GC error, ...).
func checkDeployMetricNames(t *testing.T, live map[string]bool) {
	t.Helper()
	documented := documentedMetrics(t)
	used := deployMetricNames(t)
	var fromDocs []string
	for name, where := range used {
		switch {
		case live[name]:
		case documented[name]:
			fromDocs = append(fromDocs, name)
		default:
			sort.Strings(where)
			t.Errorf("%s (queried by %s) is neither on a live member's /metrics nor in docs/operations.md", name, strings.Join(where, "; "))
		}
	}
	sort.Strings(fromDocs)
	t.Logf("%d metrics queried by deploy/: %d live, documented only: %v", len(used), len(used)-len(fromDocs), fromDocs)
}

// TestAlertRules checks the alert rules with promtool (syntax and
// templates) and runs their unit tests, and checks that every dashboard
// query is valid PromQL (promtool parses them as recording rules).
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip(promtoolMissing)
	}
	dir := filepath.Dir(alertRulesFile)
	if out, err := runTool(t, dir, promtool, "check", "rules", filepath.Base(alertRulesFile)); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := runTool(t, dir, promtool, "test", "rules", filepath.Base(alertTestsFile)); err != nil || !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}

	exprs := dashboardExprs(t)
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		// Template variables use Grafana's label_values(), not PromQL.
		if !strings.HasPrefix(k, "variable ") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, k := range keys {
		// Grafana's variables become what they stand for: a regex.
		expr := strings.NewReplacer("$job", ".*", "$instance", ".*").Replace(exprs[k])
		q, _ := json.Marshal(expr)
		fmt.Fprintf(&rules, "      - record: dashboard_query_%d\n        expr: %s\n", i, q)
	}
	tmp := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(tmp, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runTool(t, "", promtool, "check", "rules", tmp); err != nil {
		t.Errorf("dashboard queries are not valid PromQL: %v\n%s\nqueries in order: %q", err, out, keys)
	}
}

// unitExecStart returns the arguments of the unit's ExecStart after the
// binary, and the binary.
func unitExecStart(t *testing.T, unit string) (string, []string) {
	t.Helper()
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			f := strings.Fields(v)
			return f[0], f[1:]
		}
	}
	t.Fatalf("%s: no ExecStart", systemdUnitFile)
	return "", nil
}

// envFileVars reads KEY=VALUE lines (comments and blank lines skipped).
func envFileVars(t *testing.T, file string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is not KEY=VALUE", file, line)
		}
		vars[k] = v
	}
	return vars
}

// checkServeSettings runs serve's settings parsing and validation on a
// command line and environment as a deploy file gives them.
func checkServeSettings(t *testing.T, what string, args []string, env map[string]string) {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("%s: command %q does not run serve", what, args)
	}
	for k := range env {
		if !strings.HasPrefix(k, envPrefix) {
			t.Errorf("%s: %s is not a metastore setting", what, k)
		}
	}
	cfg, origin, err := loadConfig(args[1:], func(k string) string { return env[k] }, io.Discard)
	if err == nil {
		err = validate(&cfg, origin)
	}
	if err != nil {
		t.Errorf("%s: serve refuses the settings: %v", what, err)
	}
	if got := len(origin); got != len(env) {
		t.Errorf("%s: %d of %d variables are serve settings (%v)", what, got, len(env), origin)
	}
}

// TestSystemdUnit checks that the unit's command line and the example
// environment file are settings serve accepts, and, where systemd-analyze
// is installed, that the unit verifies cleanly and its exposure level
// stays at most 2.0 (systemd-analyze security).
func TestSystemdUnit(t *testing.T) {
	raw, err := os.ReadFile(systemdUnitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	exe, args := unitExecStart(t, unit)
	checkServeSettings(t, "systemd unit", args, envFileVars(t, systemdEnvFile))
	if !strings.Contains(unit, "EnvironmentFile=/etc/metastore/metastore.env") {
		t.Errorf("the unit does not read /etc/metastore/metastore.env")
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit's syntax and hardening are not checked")
	}
	// verify checks that ExecStart names an executable: the test binary
	// stands in for the installed one.
	dir := t.TempDir()
	local := filepath.Join(dir, "metastore.service")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(unit, exe, binary)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Unknown keys and bad values are warnings: any output is a finding.
	if out, err := runTool(t, dir, analyze, "verify", local); err != nil || out != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := runTool(t, dir, analyze, "security", "--offline=true", "--threshold=20", "--no-pager", "metastore.service")
	if err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0, or it failed: %v\n%s", err, lastLines(out, 3))
	} else {
		t.Logf("systemd-analyze security: %s", lastLines(out, 1))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// TestContainerfile checks what can be checked without building the image
// (there is no container engine in the test environment): the builder's Go
// matches go.mod, the package it builds exists, and the image's
// environment plus the variables of the documented docker run line are
// settings serve accepts.
func TestContainerfile(t *testing.T) {
	raw, err := os.ReadFile(containerFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)

	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(gomod))
	if goLine == nil || !strings.Contains(text, "golang:"+goLine[1]+" ") {
		t.Errorf("the builder image is not golang:%v (go.mod's go version)", goLine)
	}
	build := regexp.MustCompile(`go build .* (\./\S+)\n`).FindStringSubmatch(text)
	if build == nil {
		t.Fatal("no go build line")
	}
	if _, err := os.Stat(filepath.Join("..", "..", build[1], "main.go")); err != nil {
		t.Errorf("the image builds %s: %v", build[1], err)
	}

	env := map[string]string{}
	// ENV K=V \ K=V ... (continued lines).
	envBlock := regexp.MustCompile(`(?m)^ENV ((?:.*\\\n)*.*)$`).FindStringSubmatch(text)
	if envBlock == nil {
		t.Fatal("no ENV")
	}
	for _, kv := range strings.Fields(strings.ReplaceAll(envBlock[1], "\\", " ")) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	// The documented docker run line's -e variables.
	for _, m := range regexp.MustCompile(`-e (METASTORE_[A-Z0-9_]+)=(\S+)`).FindAllStringSubmatch(text, -1) {
		env[m[1]] = m[2]
	}
	var cmd []string
	if m := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindStringSubmatch(text); m == nil || json.Unmarshal([]byte(m[1]), &cmd) != nil {
		t.Fatalf("no CMD in exec form")
	}
	checkServeSettings(t, "Containerfile", cmd, env)
	if env["METASTORE_DATA_DIR"] == "" || !strings.Contains(text, "VOLUME "+env["METASTORE_DATA_DIR"]) {
		t.Errorf("the data directory %q is not the image's volume", env["METASTORE_DATA_DIR"])
	}
}
