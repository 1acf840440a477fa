package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Security holds the settings that protect a member from callers it does
// not expect: browsers on other sites (AllowedOrigins, AllowedHosts), an
// unauthenticated Raft port (InsecureRaft), one job taking more than its
// share (the quotas), and the logs that record who did what (AccessLog,
// AuditLog). See docs/operations.md, "Threat model".
type Security struct {
	// AllowedOrigins are the web origins (scheme://host[:port]) besides
	// the store's own whose pages may call the API from a browser. Empty:
	// only the store's own pages (same origin as the Host the request was
	// sent to). "*" allows every origin (not recommended).
	AllowedOrigins []string
	// AllowedHosts are the host names the API answers to in the Host
	// header, besides IP literals, the localhost names, this member's
	// advertised names and the names of the cluster's members. "*" turns
	// the check off. It makes DNS rebinding fail.
	AllowedHosts []string
	// InsecureRaft lets a member with Auth start with Raft on a
	// non-loopback address without TLS. Anyone who reaches that port can
	// then append entries (create tokens, change members) without a token.
	InsecureRaft bool

	// QuotaOpenIntents bounds the upload intents one job may hold open
	// (announced, not yet committed or expired); 0: no limit.
	QuotaOpenIntents int
	// QuotaLiveBytes bounds the bytes of the live blobs of one job; new
	// uploads and acks adding blobs are refused above it; 0: no limit.
	QuotaLiveBytes int64
	// QuotaAckRate bounds the acks per second of one job (0: no limit),
	// QuotaAckBurst the acks it may send at once above it.
	QuotaAckRate  float64
	QuotaAckBurst int

	// AccessLog is where one line per HTTP request goes: "" (off), "-"
	// (stderr, with the other logs) or a file path (appended).
	AccessLog string
	// LogRepeatWindow is the window in which repeated warnings of one kind
	// (TLS handshake errors, refused requests) are logged once, followed
	// by a count of those suppressed; 0 logs every one.
	LogRepeatWindow time.Duration
}

// Default quotas: far above what the stream processors this store serves
// do (a job of 10,000 tasks announcing a few uploads each, acking every
// second), far below what fills a member's disk or the Raft log.
const (
	DefaultQuotaOpenIntents = 50_000
	DefaultQuotaLiveBytes   = 1 << 50 // 1 PiB
	DefaultQuotaAckRate     = 2000
	DefaultQuotaAckBurst    = 20_000
)

// DefaultSecurity returns the defaults of Security.
func DefaultSecurity() Security {
	return Security{
		QuotaOpenIntents: DefaultQuotaOpenIntents,
		QuotaLiveBytes:   DefaultQuotaLiveBytes,
		QuotaAckRate:     DefaultQuotaAckRate,
		QuotaAckBurst:    DefaultQuotaAckBurst,
		LogRepeatWindow:  10 * time.Second,
	}
}

func (s Security) validate() error {
	for _, o := range s.AllowedOrigins {
		if o == "*" {
			continue
		}
		if _, err := NormalizeOrigin(o); err != nil {
			return bad("allowed-origins", "%v", err)
		}
	}
	for _, h := range s.AllowedHosts {
		if h == "*" {
			continue
		}
		if h == "" || strings.ContainsAny(h, ":/ ") {
			return bad("allowed-hosts", "%q is not a host name (give names without port or scheme)", h)
		}
	}
	if s.QuotaOpenIntents < 0 {
		return bad("quota-open-intents", "cannot be negative (0: no limit)")
	}
	if s.QuotaLiveBytes < 0 {
		return bad("quota-live-bytes", "cannot be negative (0: no limit)")
	}
	if s.QuotaAckRate < 0 {
		return bad("quota-ack-rate", "cannot be negative (0: no limit)")
	}
	if s.QuotaAckRate > 0 && s.QuotaAckBurst < 1 {
		return bad("quota-ack-burst", "must be at least 1 when --quota-ack-rate is set")
	}
	if s.LogRepeatWindow < 0 {
		return bad("log-repeat-window", "cannot be negative (0: log every message)")
	}
	return nil
}

// NormalizeOrigin returns the origin o (scheme://host[:port]) in the form
// browsers send: lower case, without the default port of its scheme.
func NormalizeOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return "", fmt.Errorf("%q is not an origin (scheme://host[:port], http or https)", o)
	}
	host, port := u.Hostname(), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if port != "" {
		return u.Scheme + "://" + net.JoinHostPort(host, port), nil
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host, nil
}

// checkRaftExposure refuses Auth with Raft reachable from the network in
// clear text, unless InsecureRaft says the operator accepts it.
func (c *Config) checkRaftExposure() error {
	if !c.Auth || c.TLSEnabled() || c.InsecureRaft {
		return nil
	}
	if isLoopbackAddr(c.RaftAddr) && isLoopbackAddr(c.RaftAdvertiseAddr()) {
		return nil
	}
	return bad("auth", "Raft listens on %q without TLS: anyone who reaches that port can append entries (create an operator token, change the members) without any token, so --auth would protect nothing; set --tls-cert-file, --tls-key-file and --tls-ca-file (mutual-TLS Raft), keep --raft-addr on loopback, or accept the exposure with --insecure-raft", c.RaftAddr)
}

// isLoopbackAddr reports whether host:port names a loopback host.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
