package checker

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/metastore/metastore/jepsen/history"
)

// The linearizability model. The state of a job is L, the latest
// completed epoch (0: none). Three kinds of operation act on it:
//
//   - complete(E): epoch E completes. It stands for every ack of E that
//     may have taken effect (outcome ok or unknown): the completion happens
//     atomically inside one of them, so the operation's interval runs from
//     the first of them invoked to the last of them returned (unbounded
//     when one's outcome is unknown; exactly the ack's interval when an ack
//     answered completed_by_this_ack). Certain when an ack answered
//     completed_by_this_ack or the final state shows E completed or
//     subsumed: then E > L must hold and L becomes E. Otherwise it may or
//     may not happen (a nondeterministic step: L stays, or becomes E if
//     E > L). An epoch completes at most once and completing E aborts the
//     pending epochs below it, so completions are strictly increasing: E
//     <= L is illegal for a certain completion.
//   - read -> E': a linearizable read of the latest checkpoint observed
//     E'; legal iff E' == L. Reads are the readers' (restore plan of the
//     source task) and the restores of the latest checkpoint answered ok
//     (the verifier's and every worker's reset: the same route, any task).
//   - await(E) -> completed: AwaitEpoch saw E completed (or subsumed);
//     legal iff L >= E.
type linInput struct {
	Job     string
	Kind    string // complete, read, await
	Epoch   uint64
	Certain bool
	Member  string
	// Restore is the task of a read that was a restore (a worker's or the
	// verifier's), empty for a reader's read.
	Restore string
}

type linOutput struct {
	Epoch uint64 // read: the epoch observed
}

func linModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byJob := map[string][]porcupine.Operation{}
			var jobs []string
			for _, op := range history {
				j := op.Input.(linInput).Job
				if _, ok := byJob[j]; !ok {
					jobs = append(jobs, j)
				}
				byJob[j] = append(byJob[j], op)
			}
			sort.Strings(jobs)
			out := make([][]porcupine.Operation, 0, len(jobs))
			for _, j := range jobs {
				out = append(out, byJob[j])
			}
			return out
		},
		Init: func() []any { return []any{uint64(0)} },
		Step: func(state, input, output any) []any {
			l := state.(uint64)
			in := input.(linInput)
			switch in.Kind {
			case "complete":
				if in.Certain {
					if in.Epoch > l {
						return []any{in.Epoch}
					}
					return nil
				}
				if in.Epoch > l {
					return []any{l, in.Epoch}
				}
				return []any{l}
			case "read":
				if output.(linOutput).Epoch == l {
					return []any{l}
				}
				return nil
			case "await":
				if l >= in.Epoch {
					return []any{l}
				}
				return nil
			}
			return nil
		},
		Equal: func(a, b any) bool { return a.(uint64) == b.(uint64) },
		DescribeOperation: func(input, output any) string {
			in := input.(linInput)
			switch in.Kind {
			case "complete":
				if in.Certain {
					return fmt.Sprintf("complete(%d)", in.Epoch)
				}
				return fmt.Sprintf("maybe-complete(%d)", in.Epoch)
			case "read":
				if in.Restore != "" {
					return fmt.Sprintf("restore(%s) -> %d", in.Restore, output.(linOutput).Epoch)
				}
				return fmt.Sprintf("read@%s -> %d", in.Member, output.(linOutput).Epoch)
			case "await":
				return fmt.Sprintf("await(%d) -> completed", in.Epoch)
			}
			return in.Kind
		},
		DescribeState: func(state any) string { return fmt.Sprintf("latest=%d", state.(uint64)) },
	}
	return nm.ToModel()
}

// linOps builds the porcupine history from the recorded one. final tells
// which epochs ended up completed (nil: unknown).
func linOps(ops []history.Op, final *Final) []porcupine.Operation {
	if len(ops) == 0 {
		return nil
	}
	start := ops[0].Invoke
	for _, o := range ops {
		if o.Invoke.Before(start) {
			start = o.Invoke
		}
	}
	ts := func(t time.Time) int64 { return t.Sub(start).Nanoseconds() }
	const inf = math.MaxInt64 / 2
	type epochKey struct {
		job   string
		epoch uint64
	}
	type span struct {
		call, ret int64
		certain   bool
		client    int
		any       bool
	}
	spans := map[epochKey]*span{}
	var out []porcupine.Operation
	for _, o := range ops {
		switch {
		case o.Kind == history.KindAck && o.Outcome != history.Fail:
			k := epochKey{o.Job, o.Epoch}
			s := spans[k]
			if s == nil {
				s = &span{call: inf, ret: 0, client: o.Client}
				spans[k] = s
			}
			ret := int64(inf)
			if o.Outcome == history.OK {
				ret = ts(o.Complete)
			}
			if o.Outcome == history.OK && o.Completed {
				// This ack completed the epoch: its own interval.
				s.call, s.ret, s.certain, s.client = ts(o.Invoke), ret, true, o.Client
				s.any = true
				continue
			}
			if s.certain && s.any {
				continue
			}
			s.call = min(s.call, ts(o.Invoke))
			s.ret = max(s.ret, ret)
		case o.Kind == history.KindRead && o.Outcome == history.OK:
			out = append(out, porcupine.Operation{
				ClientId: o.Client, Input: linInput{Job: o.Job, Kind: "read", Member: o.Member},
				Output: linOutput{Epoch: o.ReadEpoch}, Call: ts(o.Invoke), Return: ts(o.Complete),
			})
		case o.Kind == history.KindRestore && o.Outcome == history.OK && o.Epoch == 0:
			// A restore of the latest checkpoint (no epoch or pin named)
			// is the same linearizable read, whatever the task.
			out = append(out, porcupine.Operation{
				ClientId: o.Client, Input: linInput{Job: o.Job, Kind: "read", Member: o.Member, Restore: o.Task},
				Output: linOutput{Epoch: o.ReadEpoch}, Call: ts(o.Invoke), Return: ts(o.Complete),
			})
		case o.Kind == history.KindAwait && o.Outcome == history.OK && o.Completed:
			out = append(out, porcupine.Operation{
				ClientId: o.Client, Input: linInput{Job: o.Job, Kind: "await", Epoch: o.Epoch},
				Output: linOutput{}, Call: ts(o.Invoke), Return: ts(o.Complete),
			})
		}
	}
	for k, s := range spans {
		certain := s.certain
		if final != nil {
			if jf := final.Jobs[k.job]; jf != nil {
				for _, e := range jf.Epochs {
					if e.Epoch == k.epoch && (e.State == "completed" || e.State == "subsumed") {
						certain = true
					}
				}
			}
		}
		out = append(out, porcupine.Operation{
			ClientId: s.client, Input: linInput{Job: k.job, Kind: "complete", Epoch: k.epoch, Certain: certain},
			Output: linOutput{}, Call: s.call, Return: s.ret,
		})
	}
	// Client ids must be dense from zero for the visualization.
	ids := map[int]int{}
	var seen []int
	for _, op := range out {
		if _, ok := ids[op.ClientId]; !ok {
			ids[op.ClientId] = 0
			seen = append(seen, op.ClientId)
		}
	}
	sort.Ints(seen)
	for i, c := range seen {
		ids[c] = i
	}
	for i := range out {
		out[i].ClientId = ids[out[i].ClientId]
	}
	return out
}

// Linearizable checks each job's checkpoint history with porcupine.
func Linearizable(in *Input) Verdict {
	start := time.Now()
	var p problems
	ops := linOps(in.Ops, in.Final)
	timeout := in.LinearizabilityTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	model := linModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	v := Verdict{Name: "linearizable"}
	switch res {
	case porcupine.Ok:
		jobs := map[string]bool{}
		for _, op := range ops {
			jobs[op.Input.(linInput).Job] = true
		}
		return p.verdict("linearizable", fmt.Sprintf("%d jobs, %d operations linearizable", len(jobs), len(ops)), start)
	case porcupine.Illegal:
		p.addf("the checkpoint history of some job is not linearizable (no order of the %d operations explains every read; see the visualization)", len(ops))
	default:
		p.addf("porcupine timed out after %s on %d operations: linearizability not shown", timeout, len(ops))
	}
	v = p.verdict("linearizable", "", start)
	if in.OutDir != "" {
		path := filepath.Join(in.OutDir, "linearizability.html")
		if err := os.MkdirAll(in.OutDir, 0o755); err == nil {
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				v.Artifact = path
			} else {
				v.Problems = append(v.Problems, "visualization: "+err.Error())
			}
		}
	}
	if res == porcupine.Illegal {
		// Name the job(s) whose partition fails, checking each alone.
		for _, part := range model.Partition(ops) {
			if porcupine.CheckOperationsTimeout(model, part, timeout) == porcupine.Illegal {
				job := part[0].Input.(linInput).Job
				v.Problems = append(v.Problems, fmt.Sprintf("job %s: %s", job, explainStale(part)))
			}
		}
		if len(v.Problems) > 1 {
			v.Summary = fmt.Sprintf("not linearizable: %s", v.Problems[1])
		}
	}
	return v
}

// explainStale finds the first read that returned an epoch older than an
// epoch whose completion was acknowledged, or awaited, before the read
// began: the plainest reason a history is not linearizable.
func explainStale(part []porcupine.Operation) string {
	type done struct {
		epoch uint64
		ret   int64
	}
	var known []done
	for _, op := range part {
		in := op.Input.(linInput)
		if (in.Kind == "complete" && in.Certain && op.Return < math.MaxInt64/2) || in.Kind == "await" {
			known = append(known, done{in.Epoch, op.Return})
		}
	}
	for _, op := range part {
		in := op.Input.(linInput)
		if in.Kind != "read" {
			continue
		}
		got := op.Output.(linOutput).Epoch
		what := "a read through " + in.Member
		if in.Restore != "" {
			what = "a restore of task " + in.Restore
		}
		for _, d := range known {
			if d.ret < op.Call && d.epoch > got {
				return fmt.Sprintf("stale read: %s at %.3fs returned latest checkpoint %d, but epoch %d was known complete at %.3fs, before the read began",
					what, float64(op.Call)/1e9, got, d.epoch, float64(d.ret)/1e9)
			}
		}
	}
	return "no order of its operations explains every read (see the visualization)"
}
