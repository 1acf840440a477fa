package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/gc"
	"github.com/metastore/metastore/internal/buildinfo"
	"github.com/metastore/metastore/internal/datadir"
	"github.com/metastore/metastore/internal/logx"
	"github.com/metastore/metastore/leader"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/ui"
)

// The HTTP server's limits are settings (config.HTTPLimits), applied by
// api.NewHTTPServer and per route by the API's handler.
const (
	// drainGrace is how long in-flight requests may finish on their own
	// during shutdown before their contexts are cancelled, which ends
	// blocking queries (capped at half the remaining shutdown budget).
	drainGrace = 2 * time.Second
)

// goGCPercent is the heap growth to give Go's collector
// (--go-gc-percent), and false when the environment's GOGC chose it
// already: the runtime read that at start, and an operator who sets it
// means it.
func goGCPercent(cfg config.Config, lookupEnv func(string) (string, bool)) (int, bool) {
	if _, set := lookupEnv("GOGC"); set {
		return 0, false
	}
	return cfg.GoGCPercent, true
}

// serve runs a node with a validated configuration until SIGTERM or SIGINT,
// and returns the exit status. Logs go to stderr.
func serve(cfg config.Config, stderr io.Writer) int {
	logger := newLogger(cfg, stderr)
	defer flushLogger(logger)
	log := logger.With("component", "main")
	accessLog, closeAccess, err := openAccessLog(cfg, stderr)
	if err != nil {
		log.Error("cannot open the access log", "access_log", cfg.AccessLog, "err", err)
		return exitFailure
	}
	defer closeAccess()

	// The data directory's format is checked (and recorded, or migrated)
	// before anything in it is opened.
	format, fresh, err := datadir.Check(cfg.DataDir, buildVersion())
	if err != nil {
		log.Error("cannot use data directory", "data_dir", cfg.DataDir, "err", err)
		return exitFailure
	}
	log.Info("data directory", "data_dir", cfg.DataDir, "format", format.Format, "new", fresh,
		"created_by", format.CreatedBy, "release", buildVersion())

	// Authentication: the bootstrap and join tokens (serve_auth.go).
	bootstrapToken, joinToken, err := authTokens(cfg)
	if err != nil {
		log.Error("cannot read a token file", "err", err)
		return exitFailure
	}

	if pct, ok := goGCPercent(cfg, os.LookupEnv); ok {
		debug.SetGCPercent(pct)
	} else {
		log.Info("the Go collector's heap growth is the environment's GOGC; --go-gc-percent is not applied", "GOGC", os.Getenv("GOGC"))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	material, ok := loadTLS(cfg, logger, reg)
	if !ok {
		return exitFailure
	}

	// Bind the HTTP port first: a port in use fails the start before any
	// state is opened, and the address is known-good before Raft or a join
	// tells other members about it.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		log.Error("cannot listen for HTTP", "http_addr", cfg.HTTPAddr, "err", err)
		return exitFailure
	}
	cfg.HTTPAddr = boundAddr(cfg.HTTPAddr, ln.Addr())

	storeHealth := blobstore.NewHealth()
	store, err := blobstore.Open(context.Background(), cfg.BlobStoreLocation(), blobstore.S3Config{
		Endpoint: cfg.S3Endpoint, Region: cfg.S3Region, PathStyle: cfg.S3PathStyle,
		Timeout: cfg.S3Timeout, AttemptTimeout: cfg.S3AttemptTimeout,
		ConnectTimeout: cfg.S3ConnectTimeout, MaxAttempts: cfg.S3MaxAttempts,
		Observer:          blobstore.Observers(blobstoreObserver(reg), storeHealth.Observe),
		OnPresignFallback: presignFallback(reg, log),
	})
	if err != nil {
		ln.Close()
		log.Error("cannot open blob store", "location", cfg.BlobStoreLocation(), "err", err)
		return exitFailure
	}

	if pinger, ok := store.(interface{ Ping(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		switch err := pinger.Ping(ctx); {
		case errors.Is(err, blobstore.ErrAccessDenied):
			attrs := []any{"location", store.String(), "err", err}
			if s3, ok := store.(*blobstore.S3); ok {
				attrs = append(attrs, "credentials", s3.CredentialSource(ctx))
			}
			log.Warn("blob store access denied: check the credentials; uploads, restores and GC fail until they are right", attrs...)
		case err != nil:
			log.Warn("blob store is not reachable yet; uploads, restores and GC fail until it is", "location", store.String(), "err", err)
		}
		cancel()
	}
	if cfg.BlobStore == "" && (len(cfg.InitialCluster) > 1 || len(cfg.Join) > 0) {
		log.Warn("the local blob store keeps blobs on each member's own disk: in a cluster, uploads and reads go to the leader's directory and are lost to a new leader; use --blob-store s3://... for clusters")
	}

	f, err := fsm.Open(cfg.FSMPath(), logger.With("component", "fsm"))
	if err != nil {
		ln.Close()
		log.Error("cannot open state machine", "path", cfg.FSMPath(), "err", err)
		return exitFailure
	}
	f.SetCommitPolicy(fsm.CommitPolicy{Interval: cfg.StateCommitInterval, FollowerInterval: cfg.StateCommitIntervalFollower, MaxEntries: cfg.StateCommitEntries, MaxWrites: cfg.StateCommitWrites})

	n, err := node.New(cfg, node.Deps{
		Logger:     logger, // the node names its components (node, raft)
		FSM:        f,
		Registerer: reg,
		JoinToken:  joinToken,
		TLS:        material,
	})
	if err != nil {
		ln.Close()
		if cerr := f.Close(); cerr != nil {
			log.Error("cannot close state machine", "err", cerr)
		}
		log.Error("cannot start node", "err", err)
		return exitFailure
	}
	collector, err := gc.New(gcConfig(cfg), gc.Deps{
		FSM:     f,
		Store:   store,
		Propose: n.Propose,
		VerifyLeader: func(ctx context.Context) error {
			_, err := n.LinearizableRead(ctx)
			return err
		},
		Now:        n.Now,
		Logger:     logger,
		Registerer: reg,
	})
	if err != nil {
		ln.Close()
		if serr := n.Shutdown(context.Background()); serr != nil {
			log.Error("cannot stop node", "err", serr)
		}
		f.Close()
		log.Error("cannot configure the garbage collector", "err", err)
		return exitFailure
	}
	tasks := map[string]func(ctx context.Context){
		"epoch-timeout": leader.EpochTimeouts(n, f, logger.With("component", "epoch-timeout")),
		"gc":            collector.Run,
		"slot-key":      leader.SlotKey(n, f, logger.With("component", "upload-slots")),
	}
	if cfg.Auth {
		tasks["auth-bootstrap"] = leader.AuthBootstrap(n, f, logger.With("component", "auth"), bootstrapToken)
	}
	n.Lead(tasks)

	// The console (/ui/) in front of the API; every other path is the API's.
	handler := ui.Mount(api.New(api.Deps{
		Config:      cfg,
		Node:        n,
		FSM:         f,
		Store:       store,
		StoreHealth: storeHealth,
		GC:          collector,
		Logger:      logger.With("component", "api"),
		Registry:    reg,
		TLS:         material,
		Build:       buildinfo.Read(version),
		// Operator actions, by token accessor, never with a secret.
		AuditLog:  logger.With("component", "audit"),
		AccessLog: accessLog,
	}).Handler())

	// Request contexts derive from reqCtx; cancelling it during shutdown
	// ends blocking queries instead of waiting them out.
	reqCtx, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	srv := api.NewHTTPServer(cfg, handler, slog.NewLogLogger(logger.With("component", "http").Handler(), slog.LevelWarn))
	srv.BaseContext = func(net.Listener) context.Context { return reqCtx }
	serveErr := make(chan error, 1)
	if material != nil {
		srv.TLSConfig = material.ServerConfig()
		go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
		stopReload := reloadOnSIGHUP(material, log)
		defer stopReload()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}

	// Until here a signal terminates the process at once, which is safe:
	// nothing is served yet and bbolt and the Raft log survive a crash.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	log.Info("metastore serving",
		"http_addr", cfg.HTTPAddr,
		"scheme", cfg.HTTPScheme(),
		"raft_addr", cfg.RaftAddr,
		"node_id", cfg.NodeID,
		"data_dir", cfg.DataDir,
		"version", buildVersion())

	// A node that cannot join within --join-timeout exits with status 1:
	// idling as a member of no cluster helps nobody. Shutdown cancels the
	// join (stopJoin), which is not a failure.
	joinCtx, cancelJoin := context.WithTimeout(context.Background(), cfg.JoinTimeout)
	defer cancelJoin()
	stopping := make(chan struct{})
	stopJoin := func() {
		select {
		case <-stopping:
		default:
			close(stopping)
		}
		cancelJoin()
	}
	joinDone := make(chan struct{})
	joinFailed := make(chan error, 1)
	if len(cfg.Join) > 0 {
		go func() {
			defer close(joinDone)
			log.Info("joining cluster", "join", cfg.Join, "join_timeout", cfg.JoinTimeout)
			err := n.Join(joinCtx, cfg.Join)
			select {
			case <-stopping:
				return
			default:
			}
			if err != nil {
				joinFailed <- err
			}
		}()
	} else {
		close(joinDone)
	}

	status := exitOK
	select {
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String(), "shutdown_timeout", cfg.ShutdownTimeout)
	case err := <-serveErr:
		log.Error("HTTP server failed; shutting down", "err", err)
		status = exitFailure
	case err := <-joinFailed:
		log.Error("cannot join cluster; giving up and exiting with status 1", "join", cfg.Join, "join_timeout", cfg.JoinTimeout, "err", err)
		fmt.Fprintf(stderr, "metastore: serve: cannot join the cluster at %s within --join-timeout %s: %v\n", strings.Join(cfg.Join, ","), cfg.JoinTimeout, err)
		status = exitFailure
	}
	go func() {
		sig := <-sigs
		log.Error("second signal: exiting immediately", "signal", sig.String())
		os.Exit(exitFailure)
	}()

	if !shutdown(cfg.ShutdownTimeout, log, n, f, srv, cancelRequests, stopJoin, joinDone) {
		status = exitFailure
	}
	return status
}

// shutdown stops the node in order, within timeout: hand leadership over,
// stop the HTTP server, stop Raft, close the state machine. It reports
// whether every step succeeded.
func shutdown(timeout time.Duration, log *slog.Logger, n *node.Node, f *fsm.FSM, srv *http.Server,
	cancelRequests, cancelJoin context.CancelFunc, joinDone <-chan struct{}) bool {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ok := true

	cancelJoin()
	select {
	case <-joinDone:
	case <-ctx.Done():
	}

	if n.IsLeader() && otherVoters(n) > 0 {
		if err := n.TransferLeadership(ctx); err != nil {
			log.Warn("leadership transfer failed; followers elect a leader after the election timeout", "err", err)
		} else {
			log.Info("leadership transferred")
		}
	}

	// Draining HTTP may take half of what is left, so that Raft and the
	// leader tasks still have time to stop in order.
	deadline, _ := ctx.Deadline()
	httpCtx, cancelHTTP := context.WithTimeout(ctx, time.Until(deadline)/2)
	err := stopHTTP(httpCtx, srv, cancelRequests)
	cancelHTTP()
	if err != nil {
		log.Warn("HTTP server did not drain; connections closed", "err", err)
	}

	// Shutdown stops Raft even when it reports an error (closing the
	// transport or the log store), so nothing applies to the state machine
	// once it returns and the state machine can be closed either way.
	if err := n.Shutdown(ctx); err != nil {
		log.Error("node shutdown failed", "err", err)
		ok = false
	}
	if err := f.Close(); err != nil {
		log.Error("cannot close state machine", "err", err)
		ok = false
	}
	log.Info("shutdown complete", "elapsed", time.Since(start).Round(time.Millisecond))
	return ok
}

// otherVoters counts the voters other than n in n's view of the cluster:
// with none, there is nobody to hand leadership to.
func otherVoters(n *node.Node) int {
	st := n.Status()
	c := 0
	for _, m := range st.Members {
		if m.Suffrage == "voter" && m.ID != st.ID {
			c++
		}
	}
	return c
}

// stopHTTP stops accepting connections and lets in-flight requests finish
// for a short grace period, then cancels their contexts (ending blocking
// queries) and waits for the rest until ctx is done, when it closes every
// connection.
func stopHTTP(ctx context.Context, srv *http.Server, cancelRequests context.CancelFunc) error {
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()

	grace := drainGrace
	if deadline, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(deadline)/2)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()

	var err error
	select {
	case err = <-done:
	case <-timer.C:
		cancelRequests()
		err = <-done
	}
	cancelRequests()
	if err != nil {
		if cerr := srv.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	return err
}

// newLogger builds the root logger from the validated log settings.
// Repeated warnings of one kind are logged once per --log-repeat-window
// with a count (logx.Repeats): a connection flood cannot fill the disk
// with TLS handshake errors.
func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	return slog.New(logx.NewRepeats(newHandler(cfg, w, true), cfg.LogRepeatWindow))
}

func newHandler(cfg config.Config, w io.Writer, leveled bool) slog.Handler {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil || !leveled {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// flushLogger reports the counts of suppressed warnings not reported yet.
func flushLogger(l *slog.Logger) {
	if r, ok := l.Handler().(*logx.Repeats); ok {
		r.Flush()
	}
}

// openAccessLog opens --access-log: nil when off, stderr (with the other
// logs) for "-", else the file, appended to (mode 0600: it names
// clients). Its lines are logged whatever --log-level, never sampled.
func openAccessLog(cfg config.Config, stderr io.Writer) (*slog.Logger, func(), error) {
	switch cfg.AccessLog {
	case "":
		return nil, func() {}, nil
	case "-":
		return slog.New(newHandler(cfg, stderr, false)).With("component", "access"), func() {}, nil
	}
	f, err := os.OpenFile(cfg.AccessLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	return slog.New(newHandler(cfg, f, false)).With("component", "access"), func() { f.Close() }, nil
}

// boundAddr is the address to report for a listener configured with addr:
// addr itself, except that port 0 is replaced by the port the kernel chose.
func boundAddr(addr string, bound net.Addr) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" {
		return addr
	}
	tcp, ok := bound.(*net.TCPAddr)
	if !ok {
		return addr
	}
	return net.JoinHostPort(host, fmt.Sprint(tcp.Port))
}

// gcConfig maps the node configuration onto the collector's. The collector
// reads a zero duration as "use the default"; a configured zero grace means
// no grace, so it is passed as the smallest positive duration.
func gcConfig(cfg config.Config) gc.Config {
	orZero := func(d time.Duration) time.Duration { return max(d, time.Nanosecond) }
	return gc.Config{
		Interval:     cfg.GCInterval,
		Grace:        orZero(cfg.GCGrace),
		BatchSize:    cfg.GCBatch,
		Rate:         cfg.GCRate,
		TombstoneTTL: orZero(cfg.GCTombstoneTTL),
		OrphanGrace:  orZero(cfg.GCOrphanGrace),
		OrphanEvery:  cfg.GCOrphanEvery,
	}
}

// presignFallback reports the store's own SigV4 presigning disagreeing
// with the SDK's signer (blobstore/presign.go): a gauge that goes to 1 and
// a warning. Upload URLs stay valid (the SDK signs them from then on), at
// about five times the CPU per URL.
func presignFallback(reg prometheus.Registerer, log *slog.Logger) func() {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "metastore_blobstore_presign_sdk_fallback",
		Help: "1 once the store's own presigning of upload URLs disagreed with the AWS SDK's signer and the SDK signs them instead (slower, still valid); 0 otherwise.",
	})
	reg.MustRegister(g)
	return func() {
		g.Set(1)
		log.Warn("upload URL presigning disagreed with the AWS SDK's signer; the SDK presigns them from now on (valid, about five times the CPU per URL): please report it with the S3 endpoint and region",
			"metric", "metastore_blobstore_presign_sdk_fallback")
	}
}

// blobstoreObserver records every object-store operation in Prometheus:
// its latency and outcome, and the objects it handled.
func blobstoreObserver(reg prometheus.Registerer) blobstore.Observer {
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "metastore_blobstore_request_duration_seconds",
		Help:    "Object-store operations by operation and outcome.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
	}, []string{"op", "outcome"})
	objects := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metastore_blobstore_objects_total",
		Help: "Objects handled by object-store operations (distinct keys deleted, keys listed, else one per call).",
	}, []string{"op"})
	reg.MustRegister(latency, objects)
	return func(op string, n int, err error, d time.Duration) {
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		latency.WithLabelValues(op, outcome).Observe(d.Seconds())
		objects.WithLabelValues(op).Add(float64(n))
	}
}
