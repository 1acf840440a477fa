package api_test

import (
	"bufio"
	"strconv"
	"strings"
	"testing"
)

// scrape returns the samples of a member's /metrics answer, by series
// (name and labels as printed).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	r := do(t, "GET", url+"/metrics", nil)
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestCheckpointMetrics follows one epoch of a two-task job through the
// checkpoint metrics: pending epochs and stragglers while a task has not
// acknowledged, ack delays for each ack, and the epoch's duration once the
// last ack completes it.
func TestCheckpointMetrics(t *testing.T) {
	m := startSingle(t)
	tasks := []taskSpec{{ID: "a", Caps: []string{"state"}}, {ID: "b", Caps: []string{"state"}}}
	j := createJob(t, m.URL, "metered", tasks)
	j.begin(t, 1)

	before := scrape(t, m.URL)
	for series, want := range map[string]float64{
		`metastore_epochs_pending{job_id="metered"}`:   1,
		`metastore_epoch_stragglers{job_id="metered"}`: 2,
		`metastore_epochs_pending_scrape_error`:        0,
		`metastore_epoch_ack_delay_seconds_count`:      0,
		`metastore_epoch_duration_seconds_count`:       0,
	} {
		if got, ok := before[series]; !ok || got != want {
			t.Errorf("after begin: %s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if age, ok := before[`metastore_epoch_oldest_pending_age_seconds{job_id="metered"}`]; !ok || age < 0 {
		t.Errorf("after begin: oldest pending age %v (present %v)", age, ok)
	}

	j.ack(t, 1, "a", payloadsFor(tasks[0], 1))
	mid := scrape(t, m.URL)
	for series, want := range map[string]float64{
		`metastore_epoch_stragglers{job_id="metered"}`: 1,
		`metastore_epoch_ack_delay_seconds_count`:      1,
		`metastore_epoch_duration_seconds_count`:       0,
		`metastore_epochs_completed_total`:             0,
	} {
		if got := mid[series]; got != want {
			t.Errorf("after one ack: %s = %v, want %v", series, got, want)
		}
	}

	j.ack(t, 1, "b", payloadsFor(tasks[1], 1))
	after := scrape(t, m.URL)
	for series, want := range map[string]float64{
		`metastore_epoch_ack_delay_seconds_count`: 2,
		`metastore_epoch_duration_seconds_count`:  1,
		`metastore_epochs_completed_total`:        1,
	} {
		if got := after[series]; got != want {
			t.Errorf("after the last ack: %s = %v, want %v", series, got, want)
		}
	}
	for _, gone := range []string{`metastore_epochs_pending{job_id="metered"}`, `metastore_epoch_stragglers{job_id="metered"}`} {
		if _, ok := after[gone]; ok {
			t.Errorf("after completion %s is still reported", gone)
		}
	}
	if d := after[`metastore_epoch_duration_seconds_sum`]; d < 0 || d > after[`metastore_epoch_ack_delay_seconds_sum`] {
		t.Errorf("duration sum %v: not within the ack delays (sum %v)", d, after[`metastore_epoch_ack_delay_seconds_sum`])
	}
}
