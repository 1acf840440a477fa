package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/buildinfo"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// Path and query parameters.

// target is what a route's path names, each checked: the job and task ids,
// the epoch (1 to wire.MaxEpoch) and the attempt's generation (0 for
// "current"). A route has the fields its path template has.
type target struct {
	Job, Task  string
	Epoch, Gen uint64
}

// routeTarget reads and checks the path variables of r's route, in the order
// job, epoch, task, generation: the first bad one is the answer.
func routeTarget(r *http.Request) (target, error) {
	var t target
	var err error
	vars := mux.Vars(r)
	if _, ok := vars["job"]; ok {
		if t.Job, err = pathID(r, "job"); err != nil {
			return t, err
		}
	}
	if _, ok := vars["epoch"]; ok {
		if t.Epoch, err = pathEpoch(r); err != nil {
			return t, err
		}
	}
	if _, ok := vars["task"]; ok {
		if t.Task, err = pathID(r, "task"); err != nil {
			return t, err
		}
	}
	if raw, ok := vars["generation"]; ok && raw != "current" {
		if t.Gen, err = pathUint(r, "generation"); err != nil {
			return t, err
		}
	}
	return t, nil
}

// decodeCommand is the first half of every write route: the path's target
// and the JSON body (emptyOK: an empty body is the zero B) build the
// command's payload, which is then checked on its own (its Validate), before
// any state is read.
func decodeCommand[B any, P interface{ Validate() error }](r *http.Request, emptyOK bool, build func(target, *B) (P, error)) (P, error) {
	var zero P
	t, err := routeTarget(r)
	if err != nil {
		return zero, err
	}
	var b B
	if err := decodeBody(r, &b, emptyOK); err != nil {
		return zero, err
	}
	p, err := build(t, &b)
	if err != nil {
		return zero, err
	}
	return p, p.Validate()
}

func pathID(r *http.Request, name string) (string, error) {
	v := mux.Vars(r)[name]
	if err := wire.CheckID(name, v); err != nil {
		return "", err
	}
	return v, nil
}

func pathUint(r *http.Request, name string) (uint64, error) {
	raw := mux.Vars(r)[name]
	v, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || v == 0 {
		return 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, name, "%q is not a positive integer", raw)
	}
	return v, nil
}

// pathEpoch reads the {epoch} path variable: 1 to wire.MaxEpoch.
func pathEpoch(r *http.Request) (uint64, error) {
	v, err := pathUint(r, "epoch")
	if err == nil && v > wire.MaxEpoch {
		err = apiErr(http.StatusBadRequest, wire.CodeInvalid, "epoch", "%d is above the largest epoch, %d (2^63-1)", v, uint64(wire.MaxEpoch))
	}
	return v, err
}

// queryEpoch reads ?epoch: absent (0) or 1 to wire.MaxEpoch.
func queryEpoch(r *http.Request) (uint64, error) {
	v, err := queryUint(r, "epoch")
	if err == nil && v > wire.MaxEpoch {
		err = apiErr(http.StatusBadRequest, wire.CodeInvalid, "epoch", "%d is above the largest epoch, %d (2^63-1)", v, uint64(wire.MaxEpoch))
	}
	return v, err
}

func queryUint(r *http.Request, name string) (uint64, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, name, "%q is not a non-negative integer", raw)
	}
	return v, nil
}

// queryBool reads a true-or-false query parameter, false when absent.
func queryBool(r *http.Request, name string) (bool, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(raw)
	if err != nil {
		return false, apiErr(http.StatusBadRequest, wire.CodeInvalid, name, "%q is not true or false", raw)
	}
	return v, nil
}

func queryID(r *http.Request, name string) (string, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return "", nil
	}
	if err := wire.CheckID(name, raw); err != nil {
		return "", err
	}
	return raw, nil
}

// Cluster.

// statusBody is GET /v1/status: the node's status and the running build.
type statusBody struct {
	node.Status
	Build buildinfo.Info `json:"build"`
}

func (s *Server) status(_ *http.Request) (any, uint64, error) {
	st := s.node.Status()
	st.BlobStore = s.storeHealth()
	return statusBody{Status: st, Build: s.build}, st.AppliedIndex, nil
}

func (s *Server) membersList(_ *http.Request) (any, uint64, error) {
	st := s.node.Status()
	return wire.Membership{LeaderID: st.LeaderID, Members: st.Members}, st.AppliedIndex, nil
}

func (s *Server) membersAdd(r *http.Request) (any, uint64, error) {
	var b wire.MemberRequest
	if err := decodeBody(r, &b, false); err != nil {
		return nil, 0, err
	}
	m := fsm.MemberUpsert{ID: b.ID, RaftAddr: b.RaftAddr, HTTPAddr: b.HTTPAddr}
	if err := m.Validate(); err != nil {
		return nil, 0, err
	}
	addAudit(r, "member", m.ID, "member_raft_addr", m.RaftAddr, "member_http_addr", m.HTTPAddr)
	if err := s.node.AddVoter(r.Context(), m.ID, m.RaftAddr, m.HTTPAddr); err != nil {
		return nil, 0, err
	}
	st := s.node.Status()
	return wire.MembershipChange{Added: m.ID, Members: st.Members}, st.AppliedIndex, nil
}

func (s *Server) membersRemove(r *http.Request) (any, uint64, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, 0, err
	}
	if err := s.node.RemoveServer(r.Context(), id); err != nil {
		return nil, 0, err
	}
	st := s.node.Status()
	return wire.MembershipChange{Removed: id, Members: st.Members}, st.AppliedIndex, nil
}

func (s *Server) leaderTransfer(r *http.Request) (any, uint64, error) {
	voters := 0
	for _, m := range s.node.Status().Members {
		if m.Suffrage == "voter" {
			voters++
		}
	}
	if voters < 2 {
		return nil, 0, apiErr(http.StatusConflict, wire.CodeConflict, "", "no other voter to hand leadership to")
	}
	if err := s.node.TransferLeadership(r.Context()); err != nil {
		return nil, 0, err
	}
	st := s.node.Status()
	return wire.LeaderTransfer{LeaderID: st.LeaderID, PreviousLeader: s.cfg.NodeID}, st.AppliedIndex, nil
}

// stateHash digests this member's whole state at its applied index; two
// members at the same index must answer the same digest.
func (s *Server) stateHash(_ *http.Request) (any, uint64, error) {
	idx, h, err := s.fsm.StateHash()
	return wire.StateHash{Hash: h, ID: s.cfg.NodeID, Index: idx}, idx, err
}

// Jobs and attempts.

// jobsList lists the jobs a token may see. With ?index=N it is a blocking
// query: it answers when one of them has a modify index past N (a job was
// created or changed), or when ?wait (default and cap 5m) elapses.
func (s *Server) jobsList(r *http.Request) (any, uint64, error) {
	after, wait, err := blockingParams(r)
	if err != nil {
		return nil, 0, err
	}
	return blockingRead(r, s.fsm.Changes, wait, func() (*wire.JobList, uint64, bool, error) {
		jobs, idx, err := s.fsm.Jobs()
		if err != nil {
			return nil, idx, true, err
		}
		jobs = filterJobs(r, jobs) // a worker token sees its scope (auth.go)
		changed := after == 0
		for _, j := range jobs {
			changed = changed || j.ModifyIndex > after
		}
		return &wire.JobList{Jobs: jobs}, idx, changed, nil
	})
}

func (s *Server) jobPut(r *http.Request) (any, uint64, error) {
	p, err := decodeCommand(r, true, func(t target, b *wire.JobPutRequest) (*fsm.JobPut, error) {
		return &fsm.JobPut{Job: t.Job, Config: b.Config}, nil
	})
	if err != nil {
		return nil, 0, err
	}
	return answer(s.apply(r.Context(), fsm.CmdJobPut, p))
}

// jobDelete deletes a job (fsm.JobDelete): refused with job_pinned while it
// has pinned savepoints unless ?force=true; a repeated delete answers the
// same tombstone.
func (s *Server) jobDelete(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	force, err := queryBool(r, "force")
	if err != nil {
		return nil, 0, err
	}
	p := &fsm.JobDelete{Job: t.Job, Force: force}
	if err := p.Validate(); err != nil {
		return nil, 0, err
	}
	return answer(s.apply(r.Context(), fsm.CmdJobDelete, p))
}

// jobGet reads a job. With ?index=N it is a blocking query: it answers when
// the job's modify index passes N (an epoch began, completed or ended, an
// attempt started, the config changed), or when ?wait (default and cap 5m)
// elapses, with the job at that time.
func (s *Server) jobGet(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	after, wait, err := blockingParams(r)
	if err != nil {
		return nil, 0, err
	}
	return answer(blockingRead(r, s.fsm.Changes, wait, func() (*wire.Job, uint64, bool, error) {
		j, idx, err := s.fsm.Job(t.Job)
		return j, idx, err != nil || after == 0 || j.ModifyIndex > after, err
	}))
}

// blockingParams reads the ?index and ?wait of a blocking query.
func blockingParams(r *http.Request) (after uint64, wait time.Duration, err error) {
	after, err = queryUint(r, "index")
	if err != nil {
		return 0, 0, err
	}
	wait = MaxWait
	if raw := r.URL.Query().Get("wait"); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil || d < 0 {
			return 0, 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, "wait", "%q is not a duration such as 30s", raw)
		}
		wait = min(d, MaxWait)
	}
	return after, wait, nil
}

// blockingRead reads until read reports done or wait elapses, reading
// again after each change of the state; it answers the last read.
func blockingRead[T any](r *http.Request, changes func() <-chan struct{}, wait time.Duration, read func() (T, uint64, bool, error)) (any, uint64, error) {
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	for {
		// Take the change channel before reading, so an apply between the
		// read and the wait is not missed.
		changed := changes()
		v, idx, done, err := read()
		if err != nil {
			return nil, idx, err
		}
		if done {
			return v, idx, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if r.Context().Err() != nil {
				return nil, 0, r.Context().Err()
			}
			return v, idx, nil
		}
	}
}

func (s *Server) attemptStart(r *http.Request) (any, uint64, error) {
	p, err := decodeCommand(r, false, func(t target, b *wire.AttemptStartRequest) (*fsm.AttemptStart, error) {
		// capabilities is required (docs/openapi.json): a task that
		// checkpoints nothing says so with [], so a forgotten field is not
		// taken for it.
		tasks := make([]wire.Task, len(b.Tasks))
		for i, tk := range b.Tasks {
			if tk.Caps == nil {
				return nil, apiErr(http.StatusBadRequest, wire.CodeInvalid, fmt.Sprintf("tasks[%d].capabilities", i),
					"task %q has no capabilities; a task that checkpoints nothing has []", tk.ID)
			}
			tasks[i] = wire.Task{ID: tk.ID, Caps: *tk.Caps}
		}
		return &fsm.AttemptStart{Job: t.Job, AttemptID: b.AttemptID, Tasks: tasks}, nil
	})
	if err != nil {
		return nil, 0, err
	}
	return answer(s.apply(r.Context(), fsm.CmdAttemptStart, p))
}

// attemptsList lists the attempts of a job the store keeps, newest first:
// the current one and those that retained epochs belong to (fsm.Attempts).
// ?limit=N keeps the newest N; ?tasks=true adds each one's task set, read
// with the list in one transaction.
func (s *Server) attemptsList(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	limit, err := queryUint(r, "limit")
	if err != nil {
		return nil, 0, err
	}
	if limit > MaxAttemptsListed {
		return nil, 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, "limit", "%d is above the limit of %d", limit, MaxAttemptsListed)
	}
	tasks := false
	if raw := r.URL.Query().Get("tasks"); raw != "" {
		if tasks, err = strconv.ParseBool(raw); err != nil {
			return nil, 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, "tasks", "%q is not true or false", raw)
		}
	}
	if tasks && limit == 0 {
		limit = DefaultAttemptsWithTasks
	}
	return answer(s.fsm.Attempts(t.Job, int(limit), tasks))
}

// MaxAttemptsListed bounds ?limit of attempts.list; DefaultAttemptsWithTasks
// is its limit when the task sets are asked for without one, since each
// may hold wire.MaxTasks tasks.
const (
	MaxAttemptsListed        = 1001
	DefaultAttemptsWithTasks = 10
)

func (s *Server) attemptGet(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	return answer(s.fsm.Attempt(t.Job, t.Gen))
}

// Epochs.

func (s *Server) epochBegin(r *http.Request) (any, uint64, error) {
	p, err := decodeCommand(r, false, func(t target, b *wire.EpochBeginRequest) (*fsm.EpochBegin, error) {
		return &fsm.EpochBegin{Job: t.Job, Generation: b.Generation, Epoch: b.Epoch}, nil
	})
	if err != nil {
		return nil, 0, err
	}
	return answer(s.apply(r.Context(), fsm.CmdEpochBegin, p))
}

func (s *Server) epochsList(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	state := wire.EpochState(r.URL.Query().Get("state"))
	switch state {
	case "", wire.EpochPending, wire.EpochCompleted, wire.EpochAborted, wire.EpochSubsumed:
	default:
		return nil, 0, apiErr(http.StatusBadRequest, wire.CodeInvalid, "state", "%q is not one of pending, completed, aborted, subsumed", state)
	}
	epochs, idx, err := s.fsm.Epochs(t.Job, state)
	if err != nil {
		return nil, idx, err
	}
	return wire.EpochList{Epochs: epochs}, idx, nil
}

// epochGet reads an epoch with its statistics. With ?index=N it is a
// blocking query: it answers when the epoch's modify index passes N, or
// when ?wait (default and cap 5m) elapses, with the state at that time.
func (s *Server) epochGet(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	after, wait, err := blockingParams(r)
	if err != nil {
		return nil, 0, err
	}
	return answer(blockingRead(r, s.fsm.Changes, wait, func() (*wire.EpochDetail, uint64, bool, error) {
		e, idx, err := s.fsm.Epoch(t.Job, t.Epoch)
		return e, idx, err != nil || after == 0 || e.ModifyIndex > after, err
	}))
}

func (s *Server) taskAck(r *http.Request) (any, uint64, error) {
	p, err := decodeCommand(r, false, func(t target, b *wire.TaskAckRequest) (*fsm.TaskAck, error) {
		return &fsm.TaskAck{Job: t.Job, Generation: b.Generation, Epoch: t.Epoch, Task: t.Task, Payloads: b.Payloads, Manifest: fsmManifestAck(b.Manifest)}, nil
	})
	if err != nil {
		return nil, 0, err
	}
	return s.ack(r.Context(), p)
}

// ack checks and proposes one task's ack that passed its own checks
// (TaskAck.Validate), for the ack route and for each ack of a batch
// (acks.go) alike.
func (s *Server) ack(ctx context.Context, p *fsm.TaskAck) (any, uint64, error) {
	if err := checkBlobSizes(p.Manifest); err != nil {
		return nil, 0, err
	}
	// References to another job are refused before anything is proposed,
	// with the answer the state machine gives at apply (fsm/crossjob.go),
	// which checks them again.
	if err := s.fsm.CheckCrossJob(p); err != nil {
		return nil, s.fsm.AppliedIndex(), err
	}
	if err := s.quotas.admitAck(p.Job, p.Manifest, s.now()); err != nil {
		return nil, 0, err
	}
	if unsafeDropAcks {
		if res, idx, ok := s.unsafeDropAck(p); ok {
			return res, idx, nil
		}
	}
	v, idx, err := s.apply(ctx, fsm.CmdTaskAck, p)
	if res, ok := v.(*wire.AckResult); ok && err == nil {
		s.quotas.ackApplied(p.Job, p.Manifest)
		s.metrics.observeAck(res)
		if p.Manifest != nil && len(p.Manifest.Blobs) > 0 && s.gc != nil {
			// The leader looks at the new blobs in the object store
			// shortly after the ack, gathered with other acks' blobs, not
			// on its path (gc/observe.go).
			s.gc.ObserveSoon(len(p.Manifest.Blobs))
		}
	}
	return answer(v, idx, err)
}

func (s *Server) epochAbort(r *http.Request) (any, uint64, error) {
	p, err := decodeCommand(r, false, func(t target, b *wire.EpochAbortRequest) (*fsm.EpochAbort, error) {
		return &fsm.EpochAbort{Job: t.Job, Generation: b.Generation, Epoch: t.Epoch, Reason: b.Reason}, nil
	})
	if err != nil {
		return nil, 0, err
	}
	return answer(s.apply(r.Context(), fsm.CmdEpochAbort, p))
}

func (s *Server) epochPin(r *http.Request) (any, uint64, error) {
	p, err := decodeCommand(r, true, func(t target, b *wire.PinRequest) (*fsm.EpochPin, error) {
		return &fsm.EpochPin{Job: t.Job, Epoch: t.Epoch, Name: b.Name}, nil
	})
	if err != nil {
		return nil, 0, err
	}
	addAudit(r, "pin", p.Name)
	return answer(s.apply(r.Context(), fsm.CmdEpochPin, p))
}

func (s *Server) epochUnpin(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	p := &fsm.EpochPin{Job: t.Job, Epoch: t.Epoch}
	if err := p.Validate(); err != nil {
		return nil, 0, err
	}
	return answer(s.apply(r.Context(), fsm.CmdEpochUnpin, p))
}

// taskRestore plans a task's restore: ?epoch=N or ?pin=NAME chooses the
// checkpoint (default: the latest completed), ?source_job and ?source_task
// map the restore onto another job's or task's checkpoint.
func (s *Server) taskRestore(r *http.Request) (any, uint64, error) {
	t, err := routeTarget(r)
	if err != nil {
		return nil, 0, err
	}
	req := fsm.RestoreRequest{Job: t.Job, Task: t.Task}
	if req.Epoch, err = queryEpoch(r); err != nil {
		return nil, 0, err
	}
	if req.Pin, err = queryID(r, "pin"); err != nil {
		return nil, 0, err
	}
	if req.SourceJob, err = queryID(r, "source_job"); err != nil {
		return nil, 0, err
	}
	if req.SourceTask, err = queryID(r, "source_task"); err != nil {
		return nil, 0, err
	}
	if err := restoreSourceAllowed(r, req); err != nil { // auth.go
		return nil, 0, err
	}
	plan, idx, err := s.fsm.PlanRestore(req)
	if err != nil {
		return nil, idx, err
	}
	ans, err := s.grantReads(plan) // signed blob reads when auth is on (auth.go)
	return ans, idx, err
}

// MaxBlobSize is the largest blob an ack may declare: S3's largest object
// (5 TiB). The state machine takes any size (its log holds what it took);
// the API refuses more before anything is proposed, so that no sum of a
// manifest's ranges nears the integers' bounds.
const MaxBlobSize = 5 << 40

// checkBlobSizes refuses an ack that declares a blob larger than
// MaxBlobSize.
func checkBlobSizes(m *fsm.ManifestAck) error {
	if m == nil {
		return nil
	}
	for i, b := range m.Blobs {
		if b.Size > MaxBlobSize {
			return wire.Errorf(wire.CodeInvalid, fmt.Sprintf("manifest.blobs[%d].size", i), "blob %s declares %d bytes, more than the largest object (%d bytes, 5 TiB)", b.Key, b.Size, uint64(MaxBlobSize))
		}
	}
	return nil
}
