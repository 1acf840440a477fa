package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Per-job quotas: open upload intents (--quota-open-intents), bytes of
// live blobs (--quota-live-bytes) and acks per second (--quota-ack-rate).
// Issue 13: one worker token announced 120,000 uploads in 20 s, each a
// record in the Raft log and in every member's state file.
//
// Where the check runs. The quotas are checked on the leader, in the
// handler, against the leader's applied state, before the command is
// proposed, not in the state machine. Their limits are operator settings
// that may differ between members and change at any restart; a check in
// Apply would have to read them from the command (stamped by the
// proposer, like the time) or the members would diverge, and it would
// make a command valid or not depending on settings rather than on the
// state. A quota is a bound on resources, not an invariant of the data:
// no rule of the state machine depends on it, so a leader-side admission
// check, like Consul's checks that need the clock, is enough and keeps
// Apply deterministic. Concurrent requests do not overshoot it on a
// stable leader: admission reserves what it grants in a per-job tally
// (under one lock) until the next read of the state, which already holds
// it. What a new leader may miss is the commands in flight when
// leadership moved: at most its predecessor's last proposals.
//
// Signed upload slots (fsm/upload_slots.go) have no record to count: the
// leader tallies the ones it handed out (signedGrant) until an ack
// commits them or their lease ends. A new leader starts without its
// predecessor's tally, so a job may hold up to one lease's worth of
// signed slots beyond the quota after a change of leader.

// usageTTL is how long a read of a job's usage (fsm.JobUsage, counts kept
// in memory) is reused: the tally of grants since covers the writes the
// read does not show yet.
const usageTTL = time.Second

type jobQuotas struct {
	cfg config.Security
	fsm *fsm.FSM

	mu    sync.Mutex
	usage map[string]*jobUsage
	acks  map[string]*rate.Limiter
	// signed tallies the signed upload slots handed out, by job and lease
	// (Unix nanoseconds).
	signed map[string]map[int64]*signedGrant
	swept  time.Time
}

type jobUsage struct {
	fsm.JobUsage
	at time.Time
}

// signedGrant is one request's signed upload slots, by their lease (the
// leader gives every request its own): open until an ack commits them or
// the lease ends.
type signedGrant struct {
	lease time.Time
	used  []bool
	open  int
}

func newJobQuotas(cfg config.Security, f *fsm.FSM) *jobQuotas {
	return &jobQuotas{cfg: cfg, fsm: f, usage: map[string]*jobUsage{}, acks: map[string]*rate.Limiter{},
		signed: map[string]map[int64]*signedGrant{}}
}

// openSigned is the number of the job's signed slots still open at now;
// it forgets the grants whose lease ended. The caller holds q.mu.
func (q *jobQuotas) openSigned(job string, now time.Time) int {
	n := 0
	for l, g := range q.signed[job] {
		if !g.lease.After(now) {
			delete(q.signed[job], l)
			continue
		}
		n += g.open
	}
	if len(q.signed[job]) == 0 {
		delete(q.signed, job)
	}
	return n
}

// commitSigned closes the signed slots an ack of job commits.
func (q *jobQuotas) commitSigned(job string, m *fsm.ManifestAck) {
	if m == nil || q.signed[job] == nil {
		return
	}
	for _, b := range m.Blobs {
		lease, i, ok := fsm.SignedSlotOf(b.Key)
		if !ok {
			continue
		}
		if g := q.signed[job][lease.UnixNano()]; g != nil && i < len(g.used) && !g.used[i] {
			g.used[i] = true
			g.open--
		}
	}
}

// ackApplied closes the signed slots an ack of job committed, once the
// state machine applied it: an ack it refused commits nothing.
func (q *jobQuotas) ackApplied(job string, m *fsm.ManifestAck) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.commitSigned(job, m)
}

// current is the job's usage: a recent scan plus what was granted since.
// The caller holds q.mu.
func (q *jobQuotas) current(job string, now time.Time) (*jobUsage, error) {
	if now.Sub(q.swept) > time.Minute {
		q.swept = now
		for j, u := range q.usage {
			if now.Sub(u.at) > usageTTL {
				delete(q.usage, j)
			}
		}
		for j, l := range q.acks {
			if l.TokensAt(now) >= float64(l.Burst()) {
				delete(q.acks, j)
			}
		}
		for j := range q.signed {
			q.openSigned(j, now)
		}
	}
	if u, ok := q.usage[job]; ok && now.Sub(u.at) <= usageTTL {
		return u, nil
	}
	u := &jobUsage{JobUsage: q.fsm.JobUsage(job), at: now}
	q.usage[job] = u
	return u, nil
}

// admitIntents reserves n new upload intents of job, or refuses them. A
// non-zero signed is the lease of the n signed slots the leader is about
// to hand out; zero, the intents are recorded.
func (q *jobQuotas) admitIntents(job string, n int, now, signed time.Time) error {
	if q == nil || (q.cfg.QuotaOpenIntents == 0 && q.cfg.QuotaLiveBytes == 0) {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	u, err := q.current(job, now)
	if err != nil {
		return err
	}
	if lim := q.cfg.QuotaLiveBytes; lim > 0 && u.LiveBytes >= uint64(lim) {
		return liveBytesExceeded(job, u.LiveBytes, lim)
	}
	open := u.Intents + q.openSigned(job, now)
	if lim := q.cfg.QuotaOpenIntents; lim > 0 && open+n > lim {
		return &Error{Status: http.StatusInsufficientStorage, Code: wire.CodeQuotaExceeded, Field: "count",
			Message: fmt.Sprintf("job %q holds %d open upload intents and asks for %d more; --quota-open-intents is %d: commit the uploads with an ack or let their lease expire", job, open, n, lim)}
	}
	if signed.IsZero() {
		u.Intents += n
		return nil
	}
	if q.signed[job] == nil {
		q.signed[job] = map[int64]*signedGrant{}
	}
	q.signed[job][signed.UnixNano()] = &signedGrant{lease: signed, used: make([]bool, n), open: n}
	return nil
}

// admitAck counts an ack of job against its rate, and refuses one that
// commits blobs past the job's live bytes.
func (q *jobQuotas) admitAck(job string, m *fsm.ManifestAck, now time.Time) error {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cfg.QuotaAckRate > 0 {
		l := q.acks[job]
		if l == nil {
			l = rate.NewLimiter(rate.Limit(q.cfg.QuotaAckRate), q.cfg.QuotaAckBurst)
			q.acks[job] = l
		}
		res := l.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now)
			secs := max(1, int(math.Ceil(d.Seconds())))
			return &Error{Status: http.StatusTooManyRequests, Code: wire.CodeRateLimited, Retryable: true,
				Message: fmt.Sprintf("job %q sends acks faster than --quota-ack-rate %s/s (burst %d); retry after %ds",
					job, strconv.FormatFloat(q.cfg.QuotaAckRate, 'g', -1, 64), q.cfg.QuotaAckBurst, secs)}
		}
	}
	lim := q.cfg.QuotaLiveBytes
	if lim == 0 || m == nil || len(m.Blobs) == 0 {
		return nil
	}
	// When every blob the ack commits fits, whether some are live
	// already does not matter: the ack is admitted without reading the
	// state (a read transaction and a seek per blob, on every ack under
	// a quota far from its limit, the default's case). The usage counts
	// them all until it is read again (usageTTL), which can only make a
	// later check take the precise path below.
	all, fits := uint64(0), true
	for _, b := range m.Blobs {
		if b.Size > uint64(lim)-all { // all stays at most lim: no overflow
			fits = false
			break
		}
		all += b.Size
	}
	if u, err := q.current(job, now); err != nil {
		return err
	} else if fits && u.LiveBytes <= uint64(lim)-all {
		u.LiveBytes += all
		return nil
	}
	// Only blobs this ack makes live count: a retried ack whose blobs
	// are live already adds nothing.
	keys := make([]string, len(m.Blobs))
	for i, b := range m.Blobs {
		keys[i] = b.Key
	}
	// The cheap check reads the state machine's last commit; a refusal is
	// confirmed on the latest applied state (fsm.Flush), so entries not
	// yet committed never cause one.
	for _, latest := range []bool{false, true} {
		if latest {
			if err := q.fsm.Flush(); err != nil {
				return err
			}
			delete(q.usage, job)
		}
		committed, err := q.fsm.Committed(keys, latest)
		if err != nil {
			return err
		}
		var add uint64
		for _, b := range m.Blobs {
			if !committed[b.Key] {
				if add+b.Size < add {
					add = math.MaxUint64 // sizes past 2^64 bytes: over any quota
				} else {
					add += b.Size
				}
			}
		}
		if add == 0 {
			return nil
		}
		u, err := q.current(job, now)
		if err != nil {
			return err
		}
		if add <= uint64(lim) && u.LiveBytes <= uint64(lim)-add {
			u.LiveBytes += add
			return nil
		}
		if latest {
			return liveBytesExceeded(job, u.LiveBytes+add, lim)
		}
	}
	panic("unreachable")
}

func liveBytesExceeded(job string, bytes uint64, lim int64) error {
	return &Error{Status: http.StatusInsufficientStorage, Code: wire.CodeQuotaExceeded, Field: "manifest.blobs",
		Message: fmt.Sprintf("job %q would hold %d bytes of live blobs; --quota-live-bytes is %d: let older checkpoints be subsumed or collected first", job, bytes, lim)}
}
