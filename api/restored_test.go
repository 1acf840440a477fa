package api_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// TestRestoredAttempts: an attempt's JSON says the checkpoint it resumed
// from (0 for a fresh start), the job's JSON and its metric count the
// starts that resumed from one, and the attempts list gives the kept
// attempts newest first, each with its task set behind attempts.get.
func TestRestoredAttempts(t *testing.T) {
	m := startSingle(t)
	src := taskSpec{ID: "src", Caps: []string{"input"}}
	agg := taskSpec{ID: "agg", Caps: []string{"state", "incremental"}}
	j := createJob(t, m.URL, "restarts", []taskSpec{src, agg}) // retained 2
	var first map[string]json.RawMessage
	ok(t, "GET", j.base+"/attempts/1", nil, &first)
	if string(first["restored_from"]) != "0" {
		t.Fatalf("first attempt: restored_from %s, want 0 (a fresh start)", first["restored_from"])
	}
	for n := uint64(1); n <= 2; n++ {
		j.begin(t, n)
		j.ack(t, n, "src", payloadsFor(src, n))
		j.ack(t, n, "agg", payloadsFor(agg, n))
	}
	j.begin(t, 3) // pending: the new attempt aborts it, a restore does not read it

	sink := taskSpec{ID: "sink", Caps: []string{"output"}}
	var a2 struct {
		Generation   uint64  `json:"generation"`
		RestoredFrom *uint64 `json:"restored_from"`
	}
	ok(t, "POST", j.base+"/attempts", map[string]any{"attempt_id": "a2", "tasks": []taskSpec{src, agg, sink}}, &a2)
	if a2.Generation != 2 || a2.RestoredFrom == nil || *a2.RestoredFrom != 2 {
		t.Fatalf("second attempt: generation %d restored from %v, want generation 2 restored from 2", a2.Generation, fmtFrom(a2.RestoredFrom))
	}

	type jobJSON struct {
		ID                  string `json:"id"`
		RestoredAttempts    uint64 `json:"restored_attempts"`
		RestoresCountedFrom uint64 `json:"restores_counted_from"`
	}
	var jb jobJSON
	ok(t, "GET", j.base, nil, &jb)
	var list struct {
		Jobs []jobJSON `json:"jobs"`
	}
	ok(t, "GET", m.URL+"/v1/jobs", nil, &list)
	if jb.RestoredAttempts != 1 || jb.RestoresCountedFrom != 1 || len(list.Jobs) != 1 || list.Jobs[0] != jb {
		t.Fatalf("job: %+v, in the list %+v; want 1 restored attempt counted from generation 1", jb, list.Jobs)
	}
	if got := scrape(t, m.URL)[`metastore_job_restored_attempts_total{job_id="restarts"}`]; got != 1 {
		t.Errorf("metastore_job_restored_attempts_total = %v, want 1", got)
	}

	// Both attempts are kept (retained epochs 1 and 2 belong to
	// generation 1), newest first, and each one's task set is readable.
	var attempts struct {
		Attempts []struct {
			Generation   uint64  `json:"generation"`
			RestoredFrom *uint64 `json:"restored_from"`
			Tasks        int     `json:"tasks"`
		} `json:"attempts"`
	}
	ok(t, "GET", j.base+"/attempts", nil, &attempts)
	var got []string
	for _, a := range attempts.Attempts {
		got = append(got, fmt.Sprintf("gen %d from %s, %d tasks", a.Generation, fmtFrom(a.RestoredFrom), a.Tasks))
	}
	if want := []string{"gen 2 from 2, 3 tasks", "gen 1 from 0, 2 tasks"}; !slices.Equal(got, want) {
		t.Fatalf("attempts list: %v, want %v", got, want)
	}
	type taskSet []struct {
		ID   string   `json:"id"`
		Caps []string `json:"capabilities"`
	}
	var old struct {
		TaskList taskSet `json:"task_list"`
	}
	ok(t, "GET", j.base+"/attempts/1", nil, &old)
	if len(old.TaskList) != 2 || old.TaskList[0].ID != "agg" || !slices.Equal(old.TaskList[0].Caps, []string{"state", "incremental"}) {
		t.Fatalf("task set of generation 1: %+v", old.TaskList)
	}
	// With ?tasks=true the list carries the task sets; ?limit keeps the
	// newest, and kept still counts all.
	var withTasks struct {
		Attempts []struct {
			Generation uint64  `json:"generation"`
			TaskList   taskSet `json:"task_list"`
		} `json:"attempts"`
		Kept int `json:"kept"`
	}
	ok(t, "GET", j.base+"/attempts?tasks=true", nil, &withTasks)
	if withTasks.Kept != 2 || len(withTasks.Attempts) != 2 || len(withTasks.Attempts[0].TaskList) != 3 ||
		fmt.Sprint(withTasks.Attempts[1].TaskList) != fmt.Sprint(old.TaskList) {
		t.Fatalf("attempts with tasks: %+v", withTasks)
	}
	ok(t, "GET", j.base+"/attempts?tasks=true&limit=1", nil, &withTasks)
	if withTasks.Kept != 2 || len(withTasks.Attempts) != 1 || withTasks.Attempts[0].Generation != 2 {
		t.Fatalf("the newest attempt with tasks: %+v", withTasks)
	}
	for _, q := range []string{"?tasks=maybe", "?limit=x", "?limit=5000"} {
		if r := do(t, "GET", j.base+"/attempts"+q, nil); r.status != 400 {
			t.Errorf("attempts%s: %d %s", q, r.status, r.body)
		}
	}

	// Two completed epochs of generation 2 push generation 1 out of
	// retention: its attempt and task set go.
	j.gen = 2
	for n := uint64(4); n <= 5; n++ {
		j.begin(t, n)
		for _, ts := range []taskSpec{src, agg, sink} {
			j.ack(t, n, ts.ID, payloadsFor(ts, n))
		}
	}
	ok(t, "GET", j.base+"/attempts", nil, &attempts)
	if len(attempts.Attempts) != 1 || attempts.Attempts[0].Generation != 2 {
		t.Fatalf("attempts after retention moved: %+v", attempts.Attempts)
	}
	if r := do(t, "GET", j.base+"/attempts/1", nil); r.status != 404 {
		t.Fatalf("generation 1 after retention moved: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", m.URL+"/v1/jobs/nope/attempts", nil); r.status != 404 {
		t.Fatalf("attempts of an unknown job: %d %s", r.status, r.body)
	}
}

// fmtFrom prints an attempt's restored_from: the epoch, or absent.
func fmtFrom(p *uint64) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}
