package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/buildinfo"
	"github.com/metastore/metastore/leader"
	"github.com/metastore/metastore/wire"
)

type metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	forwarded *prometheus.CounterVec
	completed prometheus.Counter
	// ackDelay and epochDuration are observed by the leader for the acks
	// it commits.
	ackDelay      prometheus.Histogram
	epochDuration prometheus.Histogram
	// rejections counts requests refused by a limit (limits.go).
	rejections *prometheus.CounterVec
	// uploadSlots counts the upload slots handed out, signed or recorded
	// (blobs.go).
	uploadSlots *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, build buildinfo.Info) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metastore_http_requests_total",
			Help: "HTTP requests answered, by route, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "metastore_http_request_duration_seconds",
			Help:    "HTTP request latency by route and method (blocking queries included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"route", "method"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metastore_http_forwarded_total",
			Help: "Requests forwarded to the leader, by route.",
		}, []string{"route"}),
		uploadSlots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "metastore_upload_slots_total",
			Help: "Upload slots (keys) this member handed out as leader, by kind: signed (no Raft entry) or recorded (an intent-create entry).",
		}, []string{"kind"}),
		completed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_epochs_completed_total",
			Help: "Epochs completed by an ack this member proposed as leader.",
		}),
	}
	// Checkpoint intervals run from seconds to many minutes.
	epochBuckets := []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	m.ackDelay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "metastore_epoch_ack_delay_seconds",
		Help:    "Time from an epoch's begin to a task's ack of it, for the acks this member committed as leader.",
		Buckets: epochBuckets,
	})
	m.epochDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "metastore_epoch_duration_seconds",
		Help:    "Time from an epoch's begin to its completion, for the epochs completed by an ack this member committed as leader.",
		Buckets: epochBuckets,
	})
	m.rejections = newRejections()
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.forwarded, m.uploadSlots, m.completed, m.ackDelay, m.epochDuration,
			leader.EpochsTimedOut, m.rejections, buildinfo.Collector(build))
	}
	return m
}

// observeAck records an ack the leader committed: its delay and, when it
// completed the epoch, the epoch's duration.
func (m *metrics) observeAck(res *wire.AckResult) {
	if res.Ack != nil {
		m.ackDelay.Observe(time.Duration(res.Ack.Delay).Seconds())
	}
	if !res.Completed {
		return
	}
	m.completed.Inc()
	if e := res.Epoch; e != nil && e.CompletedAt != nil {
		m.epochDuration.Observe(e.CompletedAt.Sub(e.BeganAt).Seconds())
	}
}

// pendingCollector reports, at each scrape, the pending epochs in the
// member's replicated state, per job (label job_id: Prometheus owns job):
// how many, how many of their expected acks are missing (stragglers), and
// the age of the oldest; and the attempts of each job that resumed from a
// checkpoint (wire.Job.RestoredAttempts, for the jobs whose starts record
// it). Every member reports the same state (as of its applied index):
// aggregate with max, not sum.
type pendingCollector struct {
	fsm                                         *fsm.FSM
	now                                         func() time.Time
	pending, stragglers, oldest, restored, fail *prometheus.Desc
}

func newPendingCollector(f *fsm.FSM, now func() time.Time) *pendingCollector {
	return &pendingCollector{
		fsm: f,
		now: now,
		pending: prometheus.NewDesc("metastore_epochs_pending",
			"Pending epochs of a job (jobs without any are not listed).", []string{"job_id"}, nil),
		stragglers: prometheus.NewDesc("metastore_epoch_stragglers",
			"Expected acks still missing over a job's pending epochs: tasks that have not acknowledged.", []string{"job_id"}, nil),
		oldest: prometheus.NewDesc("metastore_epoch_oldest_pending_age_seconds",
			"Age of a job's oldest pending epoch, by this member's clock.", []string{"job_id"}, nil),
		restored: prometheus.NewDesc("metastore_job_restored_attempts_total",
			"Attempts of a job that resumed from a checkpoint (restored from its latest completed epoch), counted from the first start this version recorded (jobs without one are not listed).", []string{"job_id"}, nil),
		fail: prometheus.NewDesc("metastore_epochs_pending_scrape_error",
			"1 when the pending epochs could not be read from the state machine at this scrape, else 0.", nil, nil),
	}
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.stragglers
	ch <- c.oldest
	ch <- c.restored
	ch <- c.fail
}

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	failed := 0.0
	defer func() { ch <- prometheus.MustNewConstMetric(c.fail, prometheus.GaugeValue, failed) }()
	jobs, _, err := c.fsm.Jobs()
	if err != nil {
		failed = 1
		return
	}
	now := c.now()
	for _, j := range jobs {
		if j.RestoresCountedFrom != 0 {
			ch <- prometheus.MustNewConstMetric(c.restored, prometheus.CounterValue, float64(j.RestoredAttempts), j.ID)
		}
		if len(j.Pending) == 0 {
			continue
		}
		epochs, _, err := c.fsm.Epochs(j.ID, wire.EpochPending)
		if err != nil {
			failed = 1
			continue
		}
		if len(epochs) == 0 {
			continue
		}
		missing, oldest := 0, epochs[0].BeganAt
		for _, e := range epochs {
			missing += max(e.Expected-e.Acked, 0)
			if e.BeganAt.Before(oldest) {
				oldest = e.BeganAt
			}
		}
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(len(epochs)), j.ID)
		ch <- prometheus.MustNewConstMetric(c.stragglers, prometheus.GaugeValue, float64(missing), j.ID)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, max(now.Sub(oldest).Seconds(), 0), j.ID)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets forwarded responses stream.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Written reports whether the response has started.
func (w *statusWriter) Written() bool { return w.status != 0 }

func (s *Server) instrument(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		s.audit(name, r, sw.status, sw.Header().Get(HeaderServedBy))
		s.metrics.requests.WithLabelValues(name, r.Method, strconv.Itoa(sw.status)).Inc()
		s.metrics.latency.WithLabelValues(name, r.Method).Observe(time.Since(start).Seconds())
	})
}
