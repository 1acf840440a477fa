package config

import "time"

// HTTPLimits bound what one HTTP client can take from a member: how long
// it may take to send a request, how long the member keeps writing an
// answer it does not read, how large its headers may be, and how many
// requests per second and at once it may have served.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds the time to receive a request's headers.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds the time to receive the body of an ordinary
	// request (JSON bodies), from the end of its headers.
	BodyTimeout time.Duration
	// TransferTimeout bounds the time to receive or send a blob or a
	// snapshot (PUT and GET /v1/objects/..., PUT and GET /v1/snapshot).
	TransferTimeout time.Duration
	// WriteTimeout bounds the time to answer an ordinary request, from the
	// end of its headers; a blocking query and the operations that wait on
	// the object store or the cluster get the longest wait (api.MaxWait)
	// on top of it.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers; larger ones are
	// answered 431 by the HTTP server.
	MaxHeaderBytes int
	// RateLimit is the sustained requests per second one client may make
	// (0: no limit); RateBurst the requests it may make at once above it.
	RateLimit float64
	RateBurst int
	// MaxInFlight bounds the requests one client may have in progress at
	// once (0: no limit).
	MaxInFlight int
}

// DefaultHTTPLimits are the limits of the embedded default: timeouts on,
// and a per-client rate limit no real worker reaches (the benchmark's 64
// workers on one host make about 650 acks a second, with their epochs and
// upload slots well under 5,000 requests; a job restarting all of its
// tasks at once fits in the burst), which still stops one client from
// flooding the Raft log.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		ReadHeaderTimeout: 10 * time.Second,
		BodyTimeout:       time.Minute,
		TransferTimeout:   time.Hour,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		RateLimit:         DefaultRateLimit,
		RateBurst:         DefaultRateBurst,
	}
}

// Default per-client rate limit: requests per second, and at once.
const (
	DefaultRateLimit = 5000
	DefaultRateBurst = 10000
)

func (l HTTPLimits) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"http-read-header-timeout", l.ReadHeaderTimeout},
		{"http-body-timeout", l.BodyTimeout},
		{"http-transfer-timeout", l.TransferTimeout},
		{"http-write-timeout", l.WriteTimeout},
		{"http-idle-timeout", l.IdleTimeout},
	} {
		if d.v < 10*time.Millisecond {
			return bad(d.name, "%s is below the minimum 10ms", d.v)
		}
	}
	if l.MaxHeaderBytes < 4<<10 || l.MaxHeaderBytes > 16<<20 {
		return bad("http-max-header-bytes", "%d is not between %d and %d", l.MaxHeaderBytes, 4<<10, 16<<20)
	}
	if l.RateLimit < 0 {
		return bad("rate-limit", "cannot be negative")
	}
	if l.RateLimit > 0 && l.RateBurst < 1 {
		return bad("rate-burst", "must be at least 1 when --rate-limit is set")
	}
	if l.RateBurst < 0 {
		return bad("rate-burst", "cannot be negative")
	}
	if l.MaxInFlight < 0 {
		return bad("rate-max-inflight", "cannot be negative")
	}
	return nil
}
