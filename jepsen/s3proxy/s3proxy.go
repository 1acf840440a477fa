// Package s3proxy is an HTTP proxy for an S3-protocol server (path-style
// addressing) that records every request and injects object-store faults.
//
// The consistency suite points the metastore processes (--s3-endpoint) and
// the presigned upload URLs they hand out at the proxy, which forwards to
// the real cmd/s3server process. Requests keep their Host header, so SigV4
// signatures made for the proxy's address verify upstream.
//
// # Log
//
// Every request becomes a Request: sequence number, client (member id, or
// its IP), operation (PUT, GET, HEAD, DELETE, DELETE_BATCH, LIST, BUCKET,
// OTHER), bucket and key, for DeleteObjects the keys asked for and the keys
// the server reported deleted, the status the client saw (0 when the
// connection was reset or dropped), the upstream status, start time,
// latency and the fault injected. Requests and Since read it; with
// Options.LogPath it is also appended to a JSON-lines file.
//
// # Faults
//
// Rules match requests by operation, key (a regular expression; a
// DeleteObjects request matches when any of its keys does) and client, with
// a probability and a maximum count. The first matching rule that fires
// applies one Action:
//
//   - delay: wait Delay plus a random part of Jitter, then forward.
//   - error: answer Status (default 503) with an S3 error document; nothing
//     is forwarded.
//   - timeout: hold the request for Hold (default: until the client gives
//     up), then drop the connection; nothing is forwarded.
//   - lose_reply: forward the request (the server applies it) and then
//     reset the client's connection, or, with Status set, answer that
//     status instead. The caller cannot tell the write happened.
//   - late: read the request's body in full, hold it until the client has
//     given up (its connection closed) or for Hold, then forward it (the
//     server applies it after the client gave up) and drop the client's
//     connection. Holding counts the requests a rule holds.
//   - corrupt: forward the request and flip 1 to 3 bytes of a successful
//     answer's body (same length, headers unchanged); Request.Flipped
//     counts them.
package s3proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Op classifies an S3 request.
type Op string

// Operations.
const (
	OpPut         Op = "PUT"          // PutObject
	OpGet         Op = "GET"          // GetObject
	OpHead        Op = "HEAD"         // HeadObject
	OpDelete      Op = "DELETE"       // DeleteObject
	OpDeleteBatch Op = "DELETE_BATCH" // DeleteObjects (POST ?delete)
	OpList        Op = "LIST"         // ListObjects(V2)
	OpBucket      Op = "BUCKET"       // requests on the bucket itself (HeadBucket, location, create)
	OpOther       Op = "OTHER"
)

// Action is what a rule does to a request it fires on.
type Action string

// Actions.
const (
	ActDelay     Action = "delay"
	ActError     Action = "error"
	ActTimeout   Action = "timeout"
	ActLoseReply Action = "lose_reply"
	ActLate      Action = "late"
	ActCorrupt   Action = "corrupt"
)

// Rule selects requests and the fault to inject into them.
type Rule struct {
	// Name labels the rule in the request log.
	Name string `json:"name"`
	// Ops restricts the rule to these operations (empty: all).
	Ops []Op `json:"ops,omitempty"`
	// Key is a regular expression matched against the object key (empty:
	// every key, and requests without one).
	Key string `json:"key,omitempty"`
	// Client restricts the rule to one client name (member id or IP).
	Client string `json:"client,omitempty"`
	Action Action `json:"action"`
	// Delay is the wait of ActDelay; Jitter adds a uniform random part
	// in [0, Jitter) to it.
	Delay  time.Duration `json:"delay,omitempty"`
	Jitter time.Duration `json:"jitter,omitempty"`
	// Status is the answer of ActError (default 503) and, if set, of
	// ActLoseReply instead of a connection reset.
	Status int `json:"status,omitempty"`
	// Hold is how long ActTimeout holds a request before dropping its
	// connection, and ActLate at most before forwarding it (0: until the
	// client goes away).
	Hold time.Duration `json:"hold,omitempty"`
	// Prob is the probability that a matching request is hit (0 means 1).
	Prob float64 `json:"prob,omitempty"`
	// Count is the most requests the rule hits (0: no limit).
	Count int `json:"count,omitempty"`
}

// Request is one entry of the request log.
type Request struct {
	Seq    uint64 `json:"seq"`
	Client string `json:"client"`
	Method string `json:"method"`
	Op     Op     `json:"op"`
	Bucket string `json:"bucket,omitempty"`
	Key    string `json:"key,omitempty"`
	Query  string `json:"query,omitempty"`
	// Keys are the keys of a DeleteObjects request; Deleted the keys the
	// server reported deleted (for a lost reply too, though the client
	// never saw them).
	Keys    []string `json:"keys,omitempty"`
	Deleted []string `json:"deleted,omitempty"`
	// Status is what the client saw: 0 for a reset or dropped connection.
	Status int `json:"status"`
	// Upstream is the S3 server's status, 0 when the request was not
	// forwarded (or the server could not be reached).
	Upstream int `json:"upstream"`
	// Forwarded tells whether the server received the request.
	Forwarded bool          `json:"forwarded"`
	Start     time.Time     `json:"start"`
	Latency   time.Duration `json:"latency"`
	// Fault names the injected fault ("rule-name: action"), empty if none.
	Fault string `json:"fault,omitempty"`
	// Late tells that the request was forwarded after its client gave up
	// (ActLate); Flipped is the number of bytes ActCorrupt flipped in the
	// answer's body.
	Late    bool   `json:"late,omitempty"`
	Flipped int    `json:"flipped,omitempty"`
	Err     string `json:"err,omitempty"`
}

// Options configure a Proxy.
type Options struct {
	// LogPath, if set, receives every Request as a JSON line.
	LogPath string
	// ClientName maps a client IP to a name for the log (nil: the IP).
	ClientName func(ip string) string
}

type rule struct {
	Rule
	id    int
	re    *regexp.Regexp
	fired int
}

// Proxy is a running proxy.
type Proxy struct {
	ln       net.Listener
	upstream string
	opts     Options
	srv      *http.Server
	tr       *http.Transport

	mu     sync.Mutex
	rules  []*rule
	fired  map[int]int // rule id -> hits
	held   map[int]int // rule id -> requests ActLate holds now
	nextID int
	log    []Request
	seq    uint64
	file   *os.File
}

// Start listens on listenAddr and forwards to upstream ("http://host:port").
func Start(listenAddr, upstream string, opts Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		ln:       ln,
		upstream: strings.TrimRight(upstream, "/"),
		opts:     opts,
		tr: &http.Transport{
			DisableCompression:    true,
			MaxIdleConnsPerHost:   64,
			ResponseHeaderTimeout: 2 * time.Minute,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}
	if opts.LogPath != "" {
		if p.file, err = os.OpenFile(opts.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			ln.Close()
			return nil, err
		}
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Endpoint is the proxy's base URL, for --s3-endpoint.
func (p *Proxy) Endpoint() string { return "http://" + p.Addr() }

// Upstream is the S3 server's base URL.
func (p *Proxy) Upstream() string { return p.upstream }

// AddRule installs a rule (after those already installed) and returns its
// id.
func (p *Proxy) AddRule(r Rule) (int, error) {
	switch r.Action {
	case ActDelay, ActError, ActTimeout, ActLoseReply, ActLate, ActCorrupt:
	default:
		return 0, fmt.Errorf("s3proxy: unknown action %q", r.Action)
	}
	nr := &rule{Rule: r}
	if r.Key != "" {
		re, err := regexp.Compile(r.Key)
		if err != nil {
			return 0, fmt.Errorf("s3proxy: rule key: %w", err)
		}
		nr.re = re
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextID++
	nr.id = p.nextID
	p.rules = append(p.rules, nr)
	return nr.id, nil
}

// RemoveRule removes the rule with id.
func (p *Proxy) RemoveRule(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = slices.DeleteFunc(p.rules, func(r *rule) bool { return r.id == id })
}

// Fired returns how many requests the rule with id has hit so far (also
// after it was removed).
func (p *Proxy) Fired(id int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired[id]
}

// Holding returns how many requests the rule with id holds now (ActLate:
// read, not yet forwarded and logged), also after it was removed.
func (p *Proxy) Holding(id int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[id]
}

func (p *Proxy) addHeld(id, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[int]int{}
	}
	p.held[id] += n
}

// ClearRules removes every rule.
func (p *Proxy) ClearRules() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Requests returns a copy of the whole request log.
func (p *Proxy) Requests() []Request { return p.Since(0) }

// Since returns the log entries with Seq > seq.
func (p *Proxy) Since(seq uint64) []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearchFunc(p.log, seq+1, func(r Request, s uint64) int {
		switch {
		case r.Seq < s:
			return -1
		case r.Seq > s:
			return 1
		}
		return 0
	})
	return slices.Clone(p.log[i:])
}

// LastSeq is the sequence number of the latest logged request.
func (p *Proxy) LastSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Close stops the proxy.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.tr.CloseIdleConnections()
	p.mu.Lock()
	if p.file != nil {
		_ = p.file.Close()
		p.file = nil
	}
	p.mu.Unlock()
	return err
}

func (p *Proxy) record(r *Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	r.Seq = p.seq
	p.log = append(p.log, *r)
	if p.file != nil {
		if line, err := json.Marshal(r); err == nil {
			_, _ = p.file.Write(append(line, '\n'))
		}
	}
}

// match returns the rule that fires on req, counting the hit.
func (p *Proxy) match(req *Request) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.Count > 0 && r.fired >= r.Count {
			continue
		}
		if len(r.Ops) > 0 && !slices.Contains(r.Ops, req.Op) {
			continue
		}
		if r.Client != "" && r.Client != req.Client {
			continue
		}
		if r.re != nil {
			ok := req.Key != "" && r.re.MatchString(req.Key)
			for _, k := range req.Keys {
				ok = ok || r.re.MatchString(k)
			}
			if !ok {
				continue
			}
		}
		if r.Prob > 0 && r.Prob < 1 && rand.Float64() >= r.Prob {
			continue
		}
		r.fired++
		if p.fired == nil {
			p.fired = map[int]int{}
		}
		p.fired[r.id]++
		return r
	}
	return nil
}

// classify fills the operation, bucket and key of a path-style request.
func classify(r *http.Request, req *Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	req.Bucket, req.Key, _ = strings.Cut(path, "/")
	q := r.URL.Query()
	switch {
	case req.Bucket == "":
		req.Op = OpOther
	case req.Key != "":
		switch r.Method {
		case http.MethodPut:
			req.Op = OpPut
		case http.MethodGet:
			req.Op = OpGet
		case http.MethodHead:
			req.Op = OpHead
		case http.MethodDelete:
			req.Op = OpDelete
		default:
			req.Op = OpOther
		}
	case r.Method == http.MethodPost && q.Has("delete"):
		req.Op = OpDeleteBatch
	case r.Method == http.MethodGet && !q.Has("location") && !q.Has("versioning") && !q.Has("policy"):
		req.Op = OpList
	default:
		req.Op = OpBucket
	}
}

type xmlKey struct {
	Key string `xml:"Key"`
}

type deleteRequest struct {
	Quiet   bool     `xml:"Quiet"`
	Objects []xmlKey `xml:"Object"`
}

type deleteResult struct {
	Deleted []xmlKey `xml:"Deleted"`
	Errors  []xmlKey `xml:"Error"`
}

var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect"}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := &Request{Method: r.Method, Query: r.URL.RawQuery, Start: time.Now()}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	req.Client = host
	if p.opts.ClientName != nil {
		if name := p.opts.ClientName(host); name != "" {
			req.Client = name
		}
	}
	classify(r, req)
	held := 0 // the rule holding the request (ActLate), once logged
	recorded := false
	// logNow logs req before the client can see how it ended, on the
	// paths of a fault (a reply of an error, a dropped connection): the
	// retry that starts is then logged after it. Other paths log when the
	// handler returns.
	logNow := func() {
		req.Latency = time.Since(req.Start)
		p.record(req)
		recorded = true
	}
	defer func() {
		if !recorded {
			logNow()
		}
		if held != 0 {
			p.addHeld(held, -1)
		}
	}()

	var body io.Reader = r.Body
	quiet := false
	if req.Op == OpDeleteBatch {
		raw, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			req.Err = "read request body: " + err.Error()
			return
		}
		var d deleteRequest
		if xml.Unmarshal(raw, &d) == nil {
			quiet = d.Quiet
			for _, o := range d.Objects {
				req.Keys = append(req.Keys, o.Key)
			}
		}
		body = bytes.NewReader(raw)
	}

	rl := p.match(req)
	if rl != nil {
		name := rl.Name
		if name == "" {
			name = fmt.Sprintf("rule%d", rl.id)
		}
		req.Fault = name + ": " + string(rl.Action)
	}
	if rl != nil {
		switch rl.Action {
		case ActDelay:
			d := rl.Delay
			if rl.Jitter > 0 {
				d += rand.N(rl.Jitter)
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				req.Err = "client went away during the delay"
				return
			}
		case ActError:
			status := rl.Status
			if status == 0 {
				status = http.StatusServiceUnavailable
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<20))
			req.Status = status
			logNow()
			writeS3Error(w, status)
			return
		case ActTimeout:
			var hold <-chan time.Time
			if rl.Hold > 0 {
				t := time.NewTimer(rl.Hold)
				defer t.Stop()
				hold = t.C
			}
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			logNow()
			dropConn(w)
			return
		case ActLate:
			raw, err := io.ReadAll(io.LimitReader(body, 64<<20))
			if err != nil {
				req.Err = "read request body: " + err.Error()
				return
			}
			body = bytes.NewReader(raw)
			held = rl.id
			p.addHeld(held, 1)
			var hold <-chan time.Time
			if rl.Hold > 0 {
				t := time.NewTimer(rl.Hold)
				defer t.Stop()
				hold = t.C
			}
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			req.Late = r.Context().Err() != nil
			resp, err := p.forward(r, body, req)
			if err != nil {
				req.Err = err.Error()
			} else {
				req.Upstream = resp.StatusCode
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			logNow()
			dropConn(w)
			return
		}
	}

	resp, err := p.forward(r, body, req)
	if err != nil {
		req.Err = err.Error()
		req.Status = http.StatusBadGateway
		writeS3Error(w, http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	req.Upstream = resp.StatusCode

	var respBody io.Reader = resp.Body
	corrupt := rl != nil && rl.Action == ActCorrupt && resp.StatusCode/100 == 2 && r.Method != http.MethodHead
	if req.Op == OpDeleteBatch || corrupt || (rl != nil && rl.Action == ActLoseReply) {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			req.Err = "read upstream body: " + err.Error()
		}
		if req.Op == OpDeleteBatch && resp.StatusCode == http.StatusOK {
			var d deleteResult
			if xml.Unmarshal(raw, &d) == nil {
				for _, o := range d.Deleted {
					req.Deleted = append(req.Deleted, o.Key)
				}
				if quiet {
					// Quiet mode reports only the failures.
					for _, k := range req.Keys {
						if !slices.Contains(d.Errors, xmlKey{k}) {
							req.Deleted = append(req.Deleted, k)
						}
					}
				}
			}
		}
		if corrupt && len(raw) > 0 {
			// Distinct positions, each XORed with a nonzero byte: the
			// body always differs from what the server sent.
			flipped := map[int]bool{}
			for n := min(len(raw), 1+rand.IntN(3)); len(flipped) < n; {
				if i := rand.IntN(len(raw)); !flipped[i] {
					flipped[i] = true
					raw[i] ^= byte(1 + rand.IntN(255))
				}
			}
			req.Flipped = len(flipped)
		}
		respBody = bytes.NewReader(raw)
	}
	if rl != nil && rl.Action == ActLoseReply {
		if rl.Status != 0 {
			req.Status = rl.Status
			logNow()
			writeS3Error(w, rl.Status)
		} else {
			logNow()
			dropConn(w)
		}
		return
	}
	for k, vs := range resp.Header {
		if slices.Contains(hopHeaders, http.CanonicalHeaderKey(k)) {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	req.Status = resp.StatusCode
	if r.Method != http.MethodHead {
		if _, err := io.Copy(w, respBody); err != nil {
			req.Err = "copy response: " + err.Error()
		}
	}
}

// forward sends the request to the upstream server, Host header and all.
func (p *Proxy) forward(r *http.Request, body io.Reader, req *Request) (*http.Response, error) {
	// The server finishes what it received even if the client goes away,
	// as a real one would.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	out, err := http.NewRequestWithContext(ctx, r.Method, p.upstream+r.URL.RequestURI(), body)
	if err != nil {
		cancel()
		return nil, err
	}
	out.Host = r.Host
	for k, vs := range r.Header {
		if slices.Contains(hopHeaders, http.CanonicalHeaderKey(k)) {
			continue
		}
		out.Header[k] = vs
	}
	switch {
	case req.Op == OpDeleteBatch:
		out.ContentLength = int64(body.(*bytes.Reader).Len())
	case r.ContentLength > 0:
		out.ContentLength = r.ContentLength
	case r.ContentLength == 0:
		out.Body = http.NoBody
		out.ContentLength = 0
	}
	req.Forwarded = true
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{resp.Body, cancel}
	return resp, nil
}

// cancelBody ends the upstream request's context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func writeS3Error(w http.ResponseWriter, status int) {
	code := "InternalError"
	switch status {
	case http.StatusServiceUnavailable:
		code = "ServiceUnavailable"
	case http.StatusBadGateway:
		code = "BadGateway"
	case http.StatusTooManyRequests:
		code = "SlowDown"
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by s3proxy</Message></Error>`, code)
}

// dropConn resets the client's connection without an answer.
func dropConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	c, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
