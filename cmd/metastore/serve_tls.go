package main

import (
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/mtls"
)

// loadTLS loads the member's TLS material when cfg names it, and warns
// when an address other members or clients reach is served without TLS.
// ok is false when the material cannot be loaded (logged).
func loadTLS(cfg config.Config, logger *slog.Logger, reg prometheus.Registerer) (material *mtls.Reloader, ok bool) {
	log := logger.With("component", "main")
	if !cfg.TLSEnabled() {
		if !isLoopback(cfg.HTTPAddr) {
			log.Warn("the HTTP API listens on a non-loopback address without TLS: requests and answers travel in clear text; set --tls-cert-file, --tls-key-file and --tls-ca-file",
				"http_addr", cfg.HTTPAddr)
		}
		if !isLoopback(cfg.RaftAddr) {
			log.Warn("Raft listens on a non-loopback address without TLS: anyone who can reach it can take part in replication; set --tls-cert-file, --tls-key-file and --tls-ca-file",
				"raft_addr", cfg.RaftAddr)
		}
		return nil, true
	}
	material, err := mtls.NewReloader(mtls.Files{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile},
		mtls.Options{Logger: logger.With("component", "tls"), Registerer: reg})
	if err != nil {
		log.Error("cannot load the TLS material", "err", err)
		return nil, false
	}
	return material, true
}

// reloadOnSIGHUP re-reads the TLS files on every SIGHUP (they are also
// re-read when they change, at most once a second on a handshake). The
// returned function stops it.
func reloadOnSIGHUP(material *mtls.Reloader, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				log.Info("SIGHUP: reloading the TLS files")
				// A failure is logged and counted by the reloader.
				_ = material.Reload()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// isLoopback reports whether addr (host:port) listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
