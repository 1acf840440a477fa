package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

func acksWith(delays map[string]time.Duration) []wire.Ack {
	var out []wire.Ack
	for task, d := range delays {
		out = append(out, wire.Ack{Task: task, Delay: fsm.Duration(d)})
	}
	return out
}

func TestLateTasks(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		delays map[string]time.Duration
		want   string
	}{
		{"one ack", map[string]time.Duration{"a": 50 * ms}, ""},
		{"even", map[string]time.Duration{"a": 10 * ms, "b": 11 * ms, "c": 12 * ms}, ""},
		{"one late", map[string]time.Duration{"a": 10 * ms, "b": 11 * ms, "c": 12 * ms, "d": 40 * ms}, "d"},
		{"exactly twice is not late", map[string]time.Duration{"a": 10 * ms, "b": 10 * ms, "c": 20 * ms}, ""},
		// Over twice the median but by less than 1ms: noise, not late.
		{"sub-millisecond", map[string]time.Duration{"a": 100 * time.Microsecond, "b": 100 * time.Microsecond, "c": 900 * time.Microsecond}, ""},
		{"two late", map[string]time.Duration{"a": 5 * ms, "b": 5 * ms, "c": 6 * ms, "d": 30 * ms, "e": 31 * ms}, "d,e"},
	} {
		got := api.LateTasks(acksWith(tc.delays))
		if s := strings.Join(sorted(got), ","); s != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, s, tc.want)
		}
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestLateTasksMetric: a task that acknowledges each epoch far after the
// others is counted in metastore_task_late_epochs, once per epoch, over
// the latest 10 completed epochs only.
func TestLateTasksMetric(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "job-late", []taskSpec{{ID: "a", Caps: []string{"input"}}, {ID: "b", Caps: []string{"input"}}, {ID: "slow", Caps: []string{"input"}}})
	for epoch := uint64(1); epoch <= 12; epoch++ {
		j.begin(t, epoch)
		j.ack(t, epoch, "a", map[string][]byte{"input": []byte("a")})
		j.ack(t, epoch, "b", map[string][]byte{"input": []byte("b")})
		// The slow task acknowledges once the epoch is older than twice
		// the fast acks' delay and 2ms more (the member's clock is this
		// machine's): the delay is what is measured.
		var e wire.EpochDetail
		ok(t, "GET", fmt.Sprintf("%s/epochs/%d", j.base, epoch), nil, &e)
		fast := max(time.Duration(e.Acks[0].Delay), time.Duration(e.Acks[1].Delay))
		<-time.After(time.Until(e.BeganAt.Add(2*fast + 2*time.Millisecond)))
		j.ack(t, epoch, "slow", map[string][]byte{"input": []byte("s")})
	}
	resp, err := http.Get(m.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := `metastore_task_late_epochs{job_id="job-late",task="slow"} 10`
	if !strings.Contains(string(body), want+"\n") {
		t.Fatalf("/metrics has no %s:\n%s", want, grepLines(string(body), "metastore_task_late"))
	}
	if strings.Contains(string(body), `task="a"`) || strings.Contains(string(body), `task="b"`) {
		t.Fatalf("tasks never late are exported:\n%s", grepLines(string(body), "metastore_task_late"))
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

// TestChangelogMetrics: the restore bytes, changelog bytes and segments of
// the latest completed checkpoint's manifest, per task; a materialization
// empties the changelog.
func TestChangelogMetrics(t *testing.T) {
	m := startSingle(t)
	j := createJob(t, m.URL, "job-cl", []taskSpec{{ID: "agg", Caps: []string{"state", "incremental"}}, {ID: "src", Caps: []string{"input"}}})
	log1 := upload(t, j, "agg", strings.Repeat("a", 100))
	j.begin(t, 1)
	ok(t, "PUT", j.base+"/epochs/1/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []map[string]any{{"key": log1, "size": 100}},
		"delta": map[string]any{"add_segments": []map[string]any{
			{"key": log1, "offset": 0, "length": 60, "first_seq": 1, "last_seq": 5},
			{"key": log1, "offset": 60, "length": 40, "first_seq": 6, "last_seq": 9}}}}}, nil)
	j.ack(t, 1, "src", map[string][]byte{"input": []byte("o=1")})
	wantMetrics(t, m.URL, "job-cl", "agg", map[string]string{"restore_bytes": "100", "changelog_bytes": "100", "changelog_segments": "2"})

	base := upload(t, j, "agg", strings.Repeat("b", 30))
	j.begin(t, 2)
	ok(t, "PUT", j.base+"/epochs/2/acks/agg", map[string]any{"generation": 1, "manifest": map[string]any{
		"blobs": []map[string]any{{"key": base, "size": 30}},
		"delta": map[string]any{"materialize": map[string]any{
			"bases": []map[string]any{{"key": base, "offset": 0, "length": 30}}, "truncate_before": 10}}}}, nil)
	j.ack(t, 2, "src", map[string][]byte{"input": []byte("o=2")})
	wantMetrics(t, m.URL, "job-cl", "agg", map[string]string{"restore_bytes": "30", "changelog_bytes": "0", "changelog_segments": "0"})

	// Both blobs are live (the changelog's, unreferenced now, until the
	// collector takes it), counted for the job that uploaded them.
	var stats struct {
		Blobs fsm.BlobStats `json:"blobs"`
	}
	ok(t, "GET", m.URL+"/v1/blobs", nil, &stats)
	if got := stats.Blobs.LiveByJob["job-cl"]; got.Count != 2 || got.Bytes != 130 || len(stats.Blobs.LiveByJob) != 1 {
		t.Fatalf("live blobs by job: %+v", stats.Blobs.LiveByJob)
	}
}

func wantMetrics(t *testing.T, url, job, task string, want map[string]string) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for name, v := range want {
		line := fmt.Sprintf(`metastore_task_%s{job_id=%q,task=%q} %s`, name, job, task, v)
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("/metrics has no %s:\n%s", line, grepLines(string(body), "metastore_task_"))
		}
	}
	for _, name := range []string{"restore_bytes", "changelog_bytes", "changelog_segments"} {
		if strings.Contains(grepLines(string(body), "metastore_task_"+name+"{"), `task="src"`) {
			t.Errorf("metastore_task_%s of a task without a manifest is exported", name)
		}
	}
}
