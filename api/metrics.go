package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/internal/buildinfo"
)

type metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	forwarded *prometheus.CounterVec
	completed prometheus.Counter
	// rejections counts requests refused by a limit (limits.go).
	rejections *prometheus.CounterVec
}

// epochsTimedOut is counted by the leader task, which runs before a Server
// exists; it is registered with every Server's registry.
var epochsTimedOut = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "metastore_epochs_timed_out_total",
	Help: "Epochs aborted by this member, as leader, because their ack timeout passed.",
})

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
		completed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "metastore_epochs_completed_total",
			Help: "Epochs completed by an ack this member proposed as leader.",
		}),
	}
	m.rejections = newRejections()
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.forwarded, m.completed, epochsTimedOut, m.rejections, buildinfo.Collector(build))
	}
	return m
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
		s.metrics.requests.WithLabelValues(name, r.Method, strconv.Itoa(sw.status)).Inc()
		s.metrics.latency.WithLabelValues(name, r.Method).Observe(time.Since(start).Seconds())
	})
}
