package fsm_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/manifests"
	"github.com/metastore/metastore/wire"
)

// rulesFixture builds a job "j" in its second attempt with tasks src
// (input), op (state, incremental), sink (output) and idle (nothing):
//
//	epoch 3 completed and pinned as "sp", every task acked
//	epoch 4 aborted, src acked before the abort
//	epoch 5 completed
//	epoch 7 pending, op acked
//
// plus "fresh" (no attempt), "busy" (wire.MaxPendingEpochs pending epochs)
// and "old" (epoch 1 completed by its only task in generation 1, then
// attempt generation 2).
func rulesFixture(t *testing.T) (*harness, map[string]wire.Task) {
	h := newHarness(t)
	tasks := map[string]wire.Task{
		"src":  task(t, "src", "input"),
		"op":   task(t, "op", "state", "incremental"),
		"sink": task(t, "sink", "output"),
		"idle": task(t, "idle"),
	}
	list := []wire.Task{tasks["src"], tasks["op"], tasks["sink"], tasks["idle"]}
	h.putJob("j", wire.JobConfig{Retained: 3})
	h.start("j", "a1", list...)
	h.start("j", "a2", list...)
	for _, n := range []uint64{3, 5} {
		h.advance(time.Second)
		h.begin("j", 2, n)
		for _, id := range []string{"src", "op", "sink"} {
			h.ack("j", 2, n, id, payloadsFor(tasks[id], n))
		}
		if n == 3 {
			h.pin("j", 3, "sp")
			h.begin("j", 2, 4)
			h.ack("j", 2, 4, "src", payloadsFor(tasks["src"], 4))
			h.abort("j", 2, 4, "")
		}
	}
	h.begin("j", 2, 7)
	h.ack("j", 2, 7, "op", payloadsFor(tasks["op"], 7))

	h.putJob("fresh", wire.JobConfig{})
	h.putJob("busy", wire.JobConfig{})
	h.start("busy", "b1", task(t, "s", "state"))
	for n := uint64(1); n <= wire.MaxPendingEpochs; n++ {
		h.begin("busy", 1, n)
	}
	h.putJob("old", wire.JobConfig{})
	h.start("old", "o1", tasks["src"])
	h.begin("old", 1, 1)
	h.ack("old", 1, 1, "src", payloadsFor(tasks["src"], 1))
	h.start("old", "o2", tasks["src"])
	return h, tasks
}

type ruleCase struct {
	name    string
	typ     fsm.CommandType
	payload any
	want    error
	field   string // the field the error must name, when set
}

func TestRulesChangeNothing(t *testing.T) {
	h, tasks := rulesFixture(t)
	src, op := tasks["src"], tasks["op"]
	ack := func(gen, epoch uint64, task string, p map[fsm.Kind][]byte) fsm.TaskAck {
		return fsm.TaskAck{Job: "j", Generation: gen, Epoch: epoch, Task: task, Payloads: p}
	}
	manyTasks := make([]wire.Task, wire.MaxTasks+1)
	for i := range manyTasks {
		manyTasks[i] = wire.Task{ID: fmt.Sprintf("t%d", i)}
	}
	// Upload intents of job j's task op (generation 2), by batch or by key.
	lease := h.now.Add(time.Hour)
	batchOf := func(job, task, id string, count int) fsm.IntentCreate {
		return fsm.IntentCreate{Job: job, Generation: 2, Task: task, Batch: id, Count: count, LeaseUntil: lease}
	}
	manyKeys := make([]string, wire.MaxIntents+1)
	for i := range manyKeys {
		manyKeys[i] = fmt.Sprintf("j/op/k%d", i)
	}

	cases := []ruleCase{
		// Unknown job, no attempt.
		{"begin unknown job", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "nope", Generation: 1, Epoch: 1}, wire.ErrNotFound, "job"},
		{"ack unknown job", fsm.CmdTaskAck, fsm.TaskAck{Job: "nope", Generation: 1, Epoch: 1, Task: "src"}, wire.ErrNotFound, "job"},
		{"abort unknown job", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "nope", Generation: 1, Epoch: 1}, wire.ErrNotFound, "job"},
		{"attempt of unknown job", fsm.CmdAttemptStart, fsm.AttemptStart{Job: "nope", AttemptID: "a", Tasks: []wire.Task{src}}, wire.ErrNotFound, "job"},
		{"pin unknown job", fsm.CmdEpochPin, fsm.EpochPin{Job: "nope", Epoch: 1}, wire.ErrNotFound, "job"},
		{"unpin unknown job", fsm.CmdEpochUnpin, fsm.EpochPin{Job: "nope", Epoch: 1}, wire.ErrNotFound, "job"},
		{"begin before any attempt", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "fresh", Generation: 1, Epoch: 1}, wire.ErrNoAttempt, "generation"},
		{"ack before any attempt", fsm.CmdTaskAck, fsm.TaskAck{Job: "fresh", Generation: 1, Epoch: 1, Task: "src"}, wire.ErrNoAttempt, "generation"},

		// Epoch numbering.
		{"begin 6 after 7", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 2, Epoch: 6}, wire.ErrEpochNotIncreasing, "epoch"},
		{"begin 1 after 7", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 2, Epoch: 1}, wire.ErrEpochNotIncreasing, "epoch"},
		{"too many pending", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "busy", Generation: 1, Epoch: wire.MaxPendingEpochs + 1}, wire.ErrTooManyPending, "epoch"},

		// Who may ack what.
		{"ack from task not in attempt", fsm.CmdTaskAck, ack(2, 7, "ghost", nil), wire.ErrTaskNotInAttempt, "task"},
		{"ack from task without capabilities", fsm.CmdTaskAck, ack(2, 7, "idle", nil), wire.ErrTaskNotExpected, "task"},
		{"payload for a missing capability", fsm.CmdTaskAck, ack(2, 7, "src", map[fsm.Kind][]byte{wire.KindInput: []byte("o"), wire.KindState: []byte("s")}), wire.ErrCapabilityMissing, "payloads.state"},
		{"manifest from a task without state", fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 2, Epoch: 7, Task: "src", Payloads: payloadsFor(src, 7), Manifest: &fsm.ManifestAck{Full: &manifests.Manifest{}}}, wire.ErrCapabilityMissing, "manifest"},
		{"output payload from state task", fsm.CmdTaskAck, ack(2, 7, "op", map[fsm.Kind][]byte{wire.KindOutput: []byte("x")}), wire.ErrCapabilityMissing, "payloads.output"},
		{"payload over the inline limit", fsm.CmdTaskAck, ack(2, 7, "src", map[fsm.Kind][]byte{wire.KindInput: make([]byte, wire.MaxInlinePayload+1)}), wire.ErrPayloadTooLarge, "payloads.input"},
		{"payload of unknown kind", fsm.CmdTaskAck, ack(2, 7, "src", map[fsm.Kind][]byte{"offsets": []byte("x")}), wire.ErrInvalid, "payloads"},
		{"ack epoch never begun", fsm.CmdTaskAck, ack(2, 9, "src", payloadsFor(src, 9)), wire.ErrNotFound, "epoch"},
		{"ack epoch skipped", fsm.CmdTaskAck, ack(2, 6, "src", payloadsFor(src, 6)), wire.ErrNotFound, "epoch"},
		{"different ack for a pending slot", fsm.CmdTaskAck, ack(2, 7, "op", payloadsFor(op, 8)), wire.ErrConflict, "task"},

		// Ended epochs: a task that acked has its slot (a different ack is a
		// conflict, invariant 7); one that did not finds the epoch not pending.
		{"different ack for a completed epoch", fsm.CmdTaskAck, ack(2, 5, "src", payloadsFor(src, 99)), wire.ErrConflict, "task"},
		{"empty ack for a completed epoch", fsm.CmdTaskAck, ack(2, 5, "op", nil), wire.ErrConflict, "task"},
		{"different ack for an aborted epoch", fsm.CmdTaskAck, ack(2, 4, "src", payloadsFor(src, 99)), wire.ErrConflict, "task"},
		// The same ack from the task of the next generation is not a retry:
		// the epoch belongs to the generation before.
		{"ack of an earlier generation's epoch", fsm.CmdTaskAck, fsm.TaskAck{Job: "old", Generation: 2, Epoch: 1, Task: "src", Payloads: payloadsFor(src, 1)}, wire.ErrEpochNotPending, "epoch"},
		{"first ack for an aborted epoch", fsm.CmdTaskAck, ack(2, 4, "op", payloadsFor(op, 4)), wire.ErrEpochNotPending, "epoch"},
		{"abort a completed epoch", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 2, Epoch: 5}, wire.ErrEpochNotPending, "epoch"},
		{"abort epoch never begun", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 2, Epoch: 8}, wire.ErrNotFound, "epoch"},

		// Generations.
		{"begin stale generation", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: 8}, wire.ErrFenced, "generation"},
		{"ack stale generation", fsm.CmdTaskAck, ack(1, 7, "src", payloadsFor(src, 7)), wire.ErrFenced, "generation"},
		{"retried ack stale generation", fsm.CmdTaskAck, ack(1, 7, "op", payloadsFor(op, 7)), wire.ErrFenced, "generation"},
		{"abort stale generation", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 1, Epoch: 7}, wire.ErrFenced, "generation"},
		{"begin future generation", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 3, Epoch: 8}, wire.ErrInvalid, "generation"},
		{"ack future generation", fsm.CmdTaskAck, ack(3, 7, "src", payloadsFor(src, 7)), wire.ErrInvalid, "generation"},
		{"abort future generation", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 3, Epoch: 7}, wire.ErrInvalid, "generation"},
		{"begin generation 0", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Epoch: 8}, wire.ErrInvalid, "generation"},
		{"ack generation 0", fsm.CmdTaskAck, ack(0, 7, "src", nil), wire.ErrInvalid, "generation"},
		{"superseded attempt id", fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a1", Tasks: []wire.Task{src, op, tasks["sink"], tasks["idle"]}}, wire.ErrFenced, "attempt_id"},

		// Pins.
		{"pin a pending epoch", fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 7}, wire.ErrEpochNotCompleted, "epoch"},
		{"pin an aborted epoch", fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 4}, wire.ErrEpochNotCompleted, "epoch"},
		{"pin epoch never begun", fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 8}, wire.ErrNotFound, "epoch"},
		{"pin name clash", fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 5, Name: "sp"}, wire.ErrConflict, "name"},
		{"re-pin under another name", fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 3, Name: "other"}, wire.ErrConflict, "name"},
		{"re-pin without its name", fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 3}, wire.ErrConflict, "name"},

		// Malformed arguments (the API validates first; Apply checks again).
		{"bad job id", fsm.CmdJobPut, fsm.JobPut{Job: "a job"}, wire.ErrInvalid, "job"},
		{"job id with slash", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "../j", Generation: 2, Epoch: 8}, wire.ErrInvalid, "job"},
		{"retained too high", fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{Retained: 1001}}, wire.ErrInvalid, "config.retained"},
		{"retained negative", fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{Retained: -1}}, wire.ErrInvalid, "config.retained"},
		{"ack timeout too short", fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{AckTimeout: fsm.Duration(time.Millisecond)}}, wire.ErrInvalid, "config.ack_timeout"},
		{"ack timeout too long", fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{AckTimeout: fsm.Duration(7*24*time.Hour + time.Second)}}, wire.ErrInvalid, "config.ack_timeout"},
		{"history negative", fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{History: -1}}, wire.ErrInvalid, "config.history"},
		{"history too long", fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{History: 10001}}, wire.ErrInvalid, "config.history"},
		{"attempt without tasks", fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a3"}, wire.ErrInvalid, "tasks"},
		{"attempt with too many tasks", fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a3", Tasks: manyTasks}, wire.ErrInvalid, "tasks"},
		{"attempt with a task twice", fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a3", Tasks: []wire.Task{src, op, src}}, wire.ErrInvalid, "tasks[].id"},
		{"attempt with bad task id", fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a3", Tasks: []wire.Task{{ID: "-x"}}}, wire.ErrInvalid, "tasks[].id"},
		{"attempt with bad job id", fsm.CmdAttemptStart, fsm.AttemptStart{Job: "a job", AttemptID: "a3", Tasks: []wire.Task{src}}, wire.ErrInvalid, "job"},
		{"attempt with bad attempt id", fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "", Tasks: []wire.Task{src}}, wire.ErrInvalid, "attempt_id"},
		{"epoch 0", fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 2}, wire.ErrInvalid, "epoch"},
		{"ack bad task id", fsm.CmdTaskAck, ack(2, 7, "", nil), wire.ErrInvalid, "task"},
		{"abort reason with control characters", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 2, Epoch: 7, Reason: "bad\x00reason"}, wire.ErrInvalid, "reason"},
		{"abort reason too long", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 2, Epoch: 7, Reason: strings.Repeat("r", wire.MaxReasonLen+1)}, wire.ErrInvalid, "reason"},
		{"pin bad name", fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 5, Name: "no spaces"}, wire.ErrInvalid, "name"},
		{"abort bad job id", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "a job", Generation: 2, Epoch: 7}, wire.ErrInvalid, "job"},
		{"abort generation 0", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Epoch: 7}, wire.ErrInvalid, "generation"},
		{"abort epoch 0", fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 2}, wire.ErrInvalid, "epoch"},
		{"pin bad job id", fsm.CmdEpochPin, fsm.EpochPin{Job: "a job", Epoch: 5}, wire.ErrInvalid, "job"},
		{"pin epoch 0", fsm.CmdEpochPin, fsm.EpochPin{Job: "j"}, wire.ErrInvalid, "epoch"},
		{"unpin epoch 0", fsm.CmdEpochUnpin, fsm.EpochPin{Job: "j"}, wire.ErrInvalid, "epoch"},
		{"delete bad job id", fsm.CmdJobDelete, fsm.JobDelete{Job: "a job"}, wire.ErrInvalid, "job"},
		{"intents bad job id", fsm.CmdIntentCreate, batchOf("a job", "op", testBatch, 1), wire.ErrInvalid, "job"},
		{"intents bad task id", fsm.CmdIntentCreate, batchOf("j", "-x", testBatch, 1), wire.ErrInvalid, "task"},
		{"observation of no blob", fsm.CmdBlobsObserved, fsm.BlobsObserved{}, wire.ErrInvalid, "blobs"},
		{"observation of too many blobs", fsm.CmdBlobsObserved, fsm.BlobsObserved{Blobs: make([]fsm.BlobObservation, wire.MaxIntents+1)}, wire.ErrInvalid, "blobs"},
		{"observation etag with control characters", fsm.CmdBlobsObserved, fsm.BlobsObserved{Blobs: []fsm.BlobObservation{{Key: "j/op/k", ETag: "e\x00"}}}, wire.ErrInvalid, "blobs.etag"},
		{"intents stale generation", fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 1, Task: "op", Batch: testBatch, Count: 1, LeaseUntil: lease}, wire.ErrFenced, "generation"},
		{"intents future generation", fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 3, Task: "op", Keys: []string{"j/op/k"}, LeaseUntil: lease}, wire.ErrInvalid, "generation"},
		{"intents generation 0", fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Task: "op", Batch: testBatch, Count: 1, LeaseUntil: lease}, wire.ErrInvalid, "generation"},
		{"intents short batch id", fsm.CmdIntentCreate, batchOf("j", "op", "0123abcd", 1), wire.ErrInvalid, "batch"},
		{"intents batch id not lowercase hex", fsm.CmdIntentCreate, batchOf("j", "op", strings.ToUpper(testBatch), 1), wire.ErrInvalid, "batch"},
		{"intents batch naming keys", fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 2, Task: "op", Batch: testBatch, Count: 1, Keys: []string{"j/op/k"}, LeaseUntil: lease}, wire.ErrInvalid, "keys"},
		{"intents batch of no key", fsm.CmdIntentCreate, batchOf("j", "op", testBatch, 0), wire.ErrInvalid, "count"},
		{"intents batch too large", fsm.CmdIntentCreate, batchOf("j", "op", testBatch, wire.MaxIntents+1), wire.ErrInvalid, "count"},
		{"intents keys with a count", fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 2, Task: "op", Keys: []string{"j/op/k"}, Count: 1, LeaseUntil: lease}, wire.ErrInvalid, "count"},
		{"intents of no key", fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 2, Task: "op", LeaseUntil: lease}, wire.ErrInvalid, "count"},
		{"intents too many keys", fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 2, Task: "op", Keys: manyKeys, LeaseUntil: lease}, wire.ErrInvalid, "count"},
		{"intents bad key", fsm.CmdIntentCreate, fsm.IntentCreate{Job: "j", Generation: 2, Task: "op", Keys: []string{"j/../k"}, LeaseUntil: lease}, wire.ErrInvalid, "keys"},
		{"member without address", fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m1", HTTPAddr: "h:1"}, wire.ErrInvalid, "raft_addr"},
		{"member bad id", fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m 1", RaftAddr: "r:1", HTTPAddr: "h:1"}, wire.ErrInvalid, "id"},
	}
	for _, tc := range cases {
		h.run(t, tc.name, func(t *testing.T) {
			re := h.reject(tc.want, tc.typ, tc.payload)
			if tc.field != "" && re.Field != tc.field {
				t.Errorf("error %v names field %q, want %q", re, re.Field, tc.field)
			}
			if re.Message == "" {
				t.Errorf("error %v has no message", re)
			}
		})
	}

	// The fixture is what the cases assumed, and still is.
	if j := h.job("j"); j.Generation != 2 || j.LastEpoch != 7 || !slices.Equal(j.Pending, []uint64{7}) || !slices.Equal(j.Retained, []uint64{3, 5}) || !slices.Equal(j.Ended, []uint64{4}) {
		t.Fatalf("job j: %+v", j)
	}
	if e := h.epoch("j", 7); e.Acked != 1 || !slices.Equal(e.Stragglers, []string{"sink", "src"}) {
		t.Fatalf("epoch 7: %+v", e)
	}
}

// TestValidateBeforeProposal: the request types validate on their own, so
// the API can refuse bad input before it reaches the log.
func TestValidateBeforeProposal(t *testing.T) {
	big := &fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "t", Payloads: map[fsm.Kind][]byte{wire.KindState: make([]byte, wire.MaxInlinePayload+1)}}
	if err := big.Validate(); !isRule(err, wire.ErrPayloadTooLarge) {
		t.Errorf("oversized payload: %v", err)
	}
	atLimit := &fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "t", Payloads: map[fsm.Kind][]byte{wire.KindState: make([]byte, wire.MaxInlinePayload)}}
	if err := atLimit.Validate(); err != nil {
		t.Errorf("payload at the limit: %v", err)
	}
	// incremental without state cannot come in as JSON, but a Go caller can
	// build it.
	inc := &fsm.AttemptStart{Job: "j", AttemptID: "a", Tasks: []wire.Task{{ID: "t", Caps: fsm.Caps(8)}}}
	if err := inc.Validate(); !isRule(err, wire.ErrInvalid) {
		t.Errorf("incremental without state: %v", err)
	}
	// A description that is not UTF-8 cannot come in as JSON either (it
	// decodes with U+FFFD in place of the bad bytes).
	tok := &fsm.TokenCreate{Accessor: "0123456789abcdef", Hash: wire.TokenHash("x"), Role: wire.RoleOperator, Description: "d\xff"}
	if err := tok.Validate(); !isRule(err, wire.ErrInvalid) {
		t.Errorf("description not UTF-8: %v", err)
	}
	jp := &fsm.JobPut{Job: "j"}
	if err := jp.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := (wire.JobConfig{Retained: wire.DefaultRetained, AckTimeout: fsm.Duration(wire.DefaultAckTimeout), History: wire.DefaultHistory}); jp.Config != want {
		t.Errorf("defaults %+v, want %+v", jp.Config, want)
	}
	for _, names := range [][]string{{"incremental"}, {"state", "state"}, {"offsets"}} {
		if _, err := wire.ParseCaps(names); err == nil {
			t.Errorf("wire.ParseCaps(%v) accepted", names)
		}
	}
}

// TestIdempotentRetries: every mutation retried with the same content
// answers the same and changes nothing (invariant 7).
func TestIdempotentRetries(t *testing.T) {
	h := newHarness(t)
	src := task(t, "src", "input")
	op := task(t, "op", "state", "incremental")
	idle := task(t, "idle")

	// same applies a command that must succeed without changing anything.
	same := func(typ fsm.CommandType, payload any) any {
		t.Helper()
		before := h.hash()
		v := mustOK(t, h.mustApply(typ, payload))
		if h.hash() != before {
			t.Fatalf("retried %s changed the state", typ)
		}
		return v
	}

	job := h.putJob("j", wire.JobConfig{Retained: 2})
	h.advance(time.Minute)
	if again := same(fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{Retained: 2}}).(*wire.Job); again.CreateIndex != job.CreateIndex || again.ModifyIndex != job.ModifyIndex {
		t.Fatalf("retried job put: %+v, first %+v", again, job)
	}
	same(fsm.CmdJobPut, fsm.JobPut{Job: "j", Config: wire.JobConfig{Retained: 2, AckTimeout: fsm.Duration(wire.DefaultAckTimeout)}}) // defaults are the same config
	h.mustApply(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m", RaftAddr: "r:1", HTTPAddr: "h:1"})
	same(fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "m", RaftAddr: "r:1", HTTPAddr: "h:1"})

	// Attempt start: same id and tasks in another order -> same generation.
	a1 := h.start("j", "a1", src, op, idle)
	h.advance(time.Second)
	if again := same(fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a1", Tasks: []wire.Task{idle, op, src}}).(*wire.Attempt); !reflect.DeepEqual(again, a1) {
		t.Fatalf("retried attempt %+v, first %+v", again, a1)
	}
	// Same id, different task set (another capability) -> conflict.
	h.reject(wire.ErrConflict, fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a1", Tasks: []wire.Task{src, task(t, "op", "state"), idle}})
	h.reject(wire.ErrConflict, fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a1", Tasks: []wire.Task{src, op}})

	// Begin twice -> same epoch, one record.
	e1 := h.begin("j", 1, 1)
	h.advance(time.Second)
	if again := same(fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: 1}).(*wire.Epoch); *again != *e1 {
		t.Fatalf("retried begin %+v, first %+v", again, e1)
	}
	if es, _, _ := h.f.Epochs("j", ""); len(es) != 1 {
		t.Fatalf("%d epochs after a retried begin", len(es))
	}

	// Ack twice -> one ack, with the first ack's record.
	first := h.ack("j", 1, 1, "src", payloadsFor(src, 1))
	h.advance(time.Second)
	retry := same(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "src", Payloads: payloadsFor(src, 1)}).(*wire.AckResult)
	if retry.Completed || retry.Epoch.Acked != 1 || retry.Ack.Index != first.Ack.Index || !retry.Ack.At.Equal(first.Ack.At) {
		t.Fatalf("retried ack %+v (ack %+v), first ack %+v", retry, retry.Ack, first.Ack)
	}
	// A different ack for the same slot -> conflict.
	h.reject(wire.ErrConflict, fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "src", Payloads: payloadsFor(src, 2)})
	h.reject(wire.ErrConflict, fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "src"})
	h.reject(wire.ErrConflict, fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "src", Payloads: map[fsm.Kind][]byte{wire.KindInput: {}}})

	// The completing ack, then its retry: one completion.
	done := h.ack("j", 1, 1, "op", payloadsFor(op, 1))
	if !done.Completed {
		t.Fatal("second of two acks did not complete the epoch")
	}
	retry = same(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "op", Payloads: payloadsFor(op, 1)}).(*wire.AckResult)
	if retry.Completed || retry.Epoch.State != wire.EpochCompleted || retry.Epoch.Acked != 2 || retry.Ack.Index != done.Ack.Index {
		t.Fatalf("retry of the completing ack: completed=%v %+v", retry.Completed, retry.Epoch)
	}
	same(fsm.CmdTaskAck, fsm.TaskAck{Job: "j", Generation: 1, Epoch: 1, Task: "src", Payloads: payloadsFor(src, 1)})
	// ... and the retried begin of a completed epoch answers its record.
	if again := same(fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: 1}).(*wire.Epoch); again.State != wire.EpochCompleted {
		t.Fatalf("retried begin of a completed epoch: %+v", again)
	}

	// Abort twice, pin twice, unpin twice.
	h.begin("j", 1, 2)
	h.abort("j", 1, 2, "first")
	if again := same(fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 1, Epoch: 2, Reason: "second"}).(*wire.Epoch); again.Reason != "first" {
		t.Fatalf("retried abort: %+v", again)
	}
	h.pin("j", 1, "sp")
	same(fsm.CmdEpochPin, fsm.EpochPin{Job: "j", Epoch: 1, Name: "sp"})
	h.unpin("j", 1)
	same(fsm.CmdEpochUnpin, fsm.EpochPin{Job: "j", Epoch: 1})

	// Timeout of an epoch already ended aborts nothing.
	h.advance(time.Hour)
	if got := same(fsm.CmdEpochsTimeout, fsm.EpochsTimeout{Epochs: []fsm.EpochRef{{Job: "j", Epoch: 1}, {Job: "j", Epoch: 2}, {Job: "gone", Epoch: 1}, {Job: "j", Epoch: 99}}}).([]fsm.EpochRef); len(got) != 0 {
		t.Fatalf("timeout aborted %v", got)
	}

	// A newer attempt fences the old attempt id.
	h.start("j", "a2", src, op)
	h.reject(wire.ErrFenced, fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a1", Tasks: []wire.Task{src, op, idle}})
	// ... and its own retry still answers generation 2.
	if a := same(fsm.CmdAttemptStart, fsm.AttemptStart{Job: "j", AttemptID: "a2", Tasks: []wire.Task{op, src}}).(*wire.Attempt); a.Generation != 2 {
		t.Fatalf("retried attempt a2: %+v", a)
	}
}

// TestEpochsIncreaseAcrossAborts: an aborted epoch number is never reused.
// A begin that repeats it is taken as a retry of the original begin and
// answers the aborted record; a lower number that was skipped is refused.
func TestEpochsIncreaseAcrossAborts(t *testing.T) {
	h := newHarness(t)
	h.putJob("j", wire.JobConfig{History: 1})
	h.start("j", "a1", task(t, "s", "state"))
	h.begin("j", 1, 8)
	h.abort("j", 1, 8, "")
	before := h.hash()
	again := h.begin("j", 1, 8)
	if again.State != wire.EpochAborted || h.hash() != before {
		t.Fatalf("begin of aborted epoch 8: %+v (state changed: %v)", again, h.hash() != before)
	}
	h.reject(wire.ErrEpochNotIncreasing, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: 6})
	h.begin("j", 1, 9)
	h.abort("j", 1, 9, "") // history 1: epoch 8 is forgotten
	if _, _, err := h.f.Epoch("j", 8); !isRule(err, wire.ErrNotFound) {
		t.Fatalf("epoch 8 still remembered: %v", err)
	}
	h.reject(wire.ErrEpochNotIncreasing, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 1, Epoch: 8})
	// A write naming a forgotten epoch is told so, one naming a skipped
	// epoch (7: 8 was begun first) is told both (the state cannot tell
	// the two apart), and one naming an epoch above the last begun that
	// it was never begun.
	for _, n := range []uint64{8, 7} {
		if re := h.reject(wire.ErrNotFound, fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 1, Epoch: n}); !strings.Contains(re.Message, "no longer remembered") || !strings.Contains(re.Message, "skipped") {
			t.Errorf("abort of epoch %d, forgotten or skipped: %v", n, re)
		}
	}
	if re := h.reject(wire.ErrNotFound, fsm.CmdEpochAbort, fsm.EpochAbort{Job: "j", Generation: 1, Epoch: 10}); !strings.Contains(re.Message, "never begun") {
		t.Errorf("abort of epoch 10, above the last begun: %v", re)
	}
	// A new attempt does not reset the numbering.
	h.start("j", "a2", task(t, "s", "state"))
	h.reject(wire.ErrEpochNotIncreasing, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 2, Epoch: 9})
	h.reject(wire.ErrEpochNotIncreasing, fsm.CmdEpochBegin, fsm.EpochBegin{Job: "j", Generation: 2, Epoch: 1})
	if e := h.begin("j", 2, 10); e.State != wire.EpochPending || e.Generation != 2 {
		t.Fatalf("epoch 10: %+v", e)
	}
	if j := h.job("j"); j.AttemptID != "a2" || j.Generation != 2 || j.LastEpoch != 10 {
		t.Fatalf("job: %+v", j)
	}
}
