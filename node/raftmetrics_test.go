package node

import (
	"strconv"
	"strings"
	"testing"
	"time"

	metricscompat "github.com/hashicorp/go-metrics/compat"
)

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"commitTime":        "commit_time",
		"appendEntries":     "append_entries",
		"getRPCType":        "get_rpc_type",
		"rpcType":           "rpc_type",
		"heartbeat_timeout": "heartbeat_timeout",
		"logsPerBatch":      "logs_per_batch",
		"TxN":               "tx_n",
		"peer-1.x":          "peer_1_x",
		"raft":              "raft",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

// recordingSink records what promSink hands on.
type recordingSink struct {
	calls []string
}

func (r *recordingSink) record(kind string, key []string, val float32, labels []metricscompat.Label) {
	var ls []string
	for _, l := range labels {
		ls = append(ls, l.Name+"="+l.Value)
	}
	r.calls = append(r.calls, kind+" "+strings.Join(key, ".")+" "+strings.Join(ls, ",")+" "+strconv.FormatFloat(float64(val), 'g', 4, 32))
}

func (r *recordingSink) SetGauge(key []string, val float32) { r.record("gauge", key, val, nil) }
func (r *recordingSink) SetGaugeWithLabels(key []string, val float32, labels []metricscompat.Label) {
	r.record("gauge", key, val, labels)
}
func (r *recordingSink) EmitKey(key []string, val float32)     { r.record("kv", key, val, nil) }
func (r *recordingSink) IncrCounter(key []string, val float32) { r.record("counter", key, val, nil) }
func (r *recordingSink) IncrCounterWithLabels(key []string, val float32, labels []metricscompat.Label) {
	r.record("counter", key, val, labels)
}
func (r *recordingSink) AddSample(key []string, val float32) { r.record("sample", key, val, nil) }
func (r *recordingSink) AddSampleWithLabels(key []string, val float32, labels []metricscompat.Label) {
	r.record("sample", key, val, labels)
}

// TestPromSinkNames drives go-metrics, configured as installRaftMetrics
// configures it, with calls like those of hashicorp/raft and raft-boltdb,
// and checks the names, labels and values promSink hands to the Prometheus
// sink.
func TestPromSinkNames(t *testing.T) {
	rec := &recordingSink{}
	m, err := metricscompat.New(raftMetricsConfig(), promSink{next: rec})
	if err != nil {
		t.Fatal(err)
	}
	m.IncrCounter([]string{"raft", "apply"}, 1)
	m.IncrCounterWithLabels([]string{"raft", "replication", "appendEntries", "logs"}, 3, []metricscompat.Label{{Name: "peer_id", Value: "n2"}})
	m.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-1500*time.Millisecond))
	m.MeasureSinceWithLabels([]string{"raft", "net", "rpcDecode"}, time.Now().Add(-250*time.Millisecond), []metricscompat.Label{{Name: "rpcType", Value: "AppendEntries"}})
	m.AddSample([]string{"raft", "fsm", "applyBatchNum"}, 7)
	m.AddSample([]string{"raft", "leader", "lastContact"}, 40)
	m.AddSample([]string{"raft", "boltdb", "logSize"}, 512)
	m.SetGauge([]string{"raft", "commitNumLogs"}, 2)
	m.SetGauge([]string{"raft", "fsm", "lastRestoreDuration"}, 2500)

	want := []string{
		"counter metastore_raft_apply_total  1",
		"counter metastore_raft_replication_append_entries_logs_total peer_id=n2 3",
		"sample metastore_raft_commit_time_seconds  1.5",
		"sample metastore_raft_net_rpc_decode_seconds rpc_type=AppendEntries 0.25",
		"sample metastore_raft_fsm_apply_batch_num  7",
		"sample metastore_raft_leader_last_contact_seconds  0.04",
		"sample metastore_raft_boltdb_log_size_bytes  512",
		"gauge metastore_raft_commit_num_logs  2",
		"gauge metastore_raft_fsm_last_restore_duration_seconds  2.5",
	}
	if len(rec.calls) != len(want) {
		t.Fatalf("got %d calls, want %d:\n%s", len(rec.calls), len(want), strings.Join(rec.calls, "\n"))
	}
	for i := range want {
		got := rec.calls[i]
		if strings.Contains(want[i], "_seconds") && !strings.Contains(want[i], "last_") {
			// Timers measure real time: at least what the call says, and
			// well under a second more.
			if !sameTiming(got, want[i]) {
				t.Errorf("call %d: got %q, want %q (or up to 0.5s more)", i, got, want[i])
			}
			continue
		}
		if got != want[i] {
			t.Errorf("call %d: got %q, want %q", i, got, want[i])
		}
	}
}

// sameTiming reports whether two recorded calls differ only in the number
// at their end, got's being at least want's and less than 0.5 more.
func sameTiming(got, want string) bool {
	gi, wi := strings.LastIndexByte(got, ' '), strings.LastIndexByte(want, ' ')
	if got[:gi] != want[:wi] {
		return false
	}
	g, err1 := strconv.ParseFloat(got[gi+1:], 64)
	w, err2 := strconv.ParseFloat(want[wi+1:], 64)
	return err1 == nil && err2 == nil && g >= w && g < w+0.5
}
