package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/metastore/metastore/client"
)

// This file is the client side of the operator commands: their common
// flags, the parsing of their command lines, and call, through which every
// command talks to a node with the Go client (package client).

// defaultAddr is the node the client commands talk to by default.
const defaultAddr = "http://127.0.0.1:7070"

// defaultTimeout bounds a JSON request; streamTimeout a snapshot transfer.
const (
	defaultTimeout = 30 * time.Second
	streamTimeout  = time.Hour
)

// clientOptions are the flags every client command takes.
type clientOptions struct {
	addr    string
	json    bool
	timeout time.Duration
	// token and tokenFile give the bearer token (cli_tokens.go).
	token, tokenFile string

	tls clientTLS // cli_tls.go
}

// newClientFlags returns the flag set of a client command, with --addr
// defaulting to METASTORE_ADDR when that is set.
func newClientFlags(name string, getenv func(string) string) (*flag.FlagSet, *clientOptions) {
	return newClientFlagsTimeout(name, getenv, defaultTimeout)
}

// newClientFlagsTimeout is newClientFlags with another default --timeout.
func newClientFlagsTimeout(name string, getenv func(string) string, timeout time.Duration) (*flag.FlagSet, *clientOptions) {
	o := &clientOptions{addr: defaultAddr}
	if v := getenv(envName("addr")); v != "" {
		o.addr = v
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.addr, "addr", o.addr, "HTTP address of a metastore node ["+envName("addr")+"]")
	fs.BoolVar(&o.json, "json", false, "print the API's answer as JSON")
	fs.DurationVar(&o.timeout, "timeout", timeout, "how long to wait for the answer")
	o.tokenFlags(fs, getenv)
	o.tls.register(fs, getenv)
	return fs, o
}

// parseClientArgs parses flags and positional arguments in any order and
// checks the number of positional arguments. On a usage problem it prints
// one line (or the usage, for -h) and returns the exit status to use.
func parseClientArgs(fs *flag.FlagSet, args []string, synopsis string, wantArgs int, stdout, stderr io.Writer) ([]string, int, bool) {
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: metastore %s\n\nFlags:\n", synopsis)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil, exitOK, false
	}
	if err == nil && len(pos) != wantArgs {
		err = fmt.Errorf("want %d argument(s), got %d", wantArgs, len(pos))
	}
	if err == nil {
		if t := fs.Lookup("timeout"); t != nil && t.Value.(flag.Getter).Get().(time.Duration) <= 0 {
			err = errors.New("--timeout must be positive")
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "metastore: %s: %v (usage: metastore %s)\n", fs.Name(), err, synopsis)
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}

// parseInterleaved parses fs from args, allowing positional arguments
// between flags ("members remove n4 --addr ..."). Everything after "--" is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// apiError is an error answer of the HTTP API:
// {"error":{"code":"...","field":"...","message":"..."}}.
type apiError struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// baseURL turns --addr into a URL: a bare host:port means http.
func (o *clientOptions) baseURL() (*url.URL, error) {
	addr := strings.TrimRight(o.addr, "/")
	if addr == defaultAddr {
		addr = strings.TrimPrefix(addr, "http://")
	}
	if !strings.Contains(addr, "://") {
		addr = o.tls.defaultScheme() + "://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--addr %q is not an http(s) URL or host:port", o.addr)
	}
	return u, nil
}

// apiPath joins escaped path segments: apiPath("/v1/jobs", job, "epochs").
func apiPath(prefix string, segments ...string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// withQuery appends the non-empty values of q to path.
func withQuery(path string, q url.Values) string {
	for k, vs := range q {
		if len(vs) == 0 || (len(vs) == 1 && vs[0] == "") {
			delete(q, k)
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// apiClient is the Go client (package client) the commands talk through:
// to the one member --addr names (no discovery of the others), one attempt
// per call (a command reports what happened rather than retrying), each
// bounded by --timeout.
func (o *clientOptions) apiClient() (*client.Client, error) {
	base, err := o.baseURL()
	if err != nil {
		return nil, err
	}
	hc, err := o.tls.httpClient()
	if err != nil {
		return nil, err
	}
	tok, err := o.bearer()
	if err != nil {
		return nil, err
	}
	return client.New(client.Config{
		Endpoints:        []string{base.String()},
		HTTPClient:       hc,
		DisableDiscovery: true,
		MaxAttempts:      1,
		RequestTimeout:   o.timeout,
		Token:            tok,
	})
}

// call runs one call of the Go client, bounded by --timeout, and returns
// the body of its answer as the member sent it (printed by --json, decoded
// by the tables). method and path name the request in error messages.
func (o *clientOptions) call(method, path string, f func(ctx context.Context, c *client.Client) error) ([]byte, error) {
	c, err := o.apiClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var raw []byte
	if err := f(client.WithRawAnswer(ctx, &raw), c); err != nil {
		return nil, o.describe(method, path, err)
	}
	return raw, nil
}

// describe turns an error of the Go client into the command's one line:
// an API error as its code and message (*apiError), another answer as its
// status and first line, a transport failure as what went wrong with the
// connection.
func (o *clientOptions) describe(method, path string, err error) error {
	base, berr := o.baseURL()
	if berr != nil {
		return berr
	}
	target := base.String() + path
	// One attempt: a retry error carries the one failure.
	var re *client.RetryError
	if errors.As(err, &re) && re.Last != nil {
		err = re.Last
	}
	var ae *client.APIError
	if errors.As(err, &ae) {
		if !strings.HasPrefix(string(ae.Code), "http_") {
			return &apiError{Code: string(ae.Code), Field: ae.Field, Message: ae.Message}
		}
		// Not an API error (a proxy in the way, a crash): its first line.
		text, _, _ := strings.Cut(strings.TrimSpace(ae.Message), "\n")
		if len(text) > 200 {
			text = text[:200] + "..."
		}
		if ae.Status == http.StatusBadRequest && base.Scheme == "http" && strings.Contains(text, "HTTPS server") {
			text += " (the node serves https: give --addr as https://... and the cluster's CA with --ca-file)"
		}
		return fmt.Errorf("%s %s: %d %s: %s", method, target, ae.Status, http.StatusText(ae.Status), text)
	}
	if hint := o.tls.tlsHint(err); hint != "" {
		return fmt.Errorf("%s %s: %v%s", method, target, unwrapURLError(err), hint)
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot connect to %s: connection refused (is 'metastore serve' running there?)", base)
	case isDialError(err):
		return fmt.Errorf("cannot connect to %s: %v", base, unwrapURLError(err))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from %s within %s", base, o.timeout)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s %s: interrupted", method, target)
	}
	return fmt.Errorf("%s %s: %w", method, target, unwrapURLError(err))
}

// readError describes a failure while reading the body of an answer.
func (o *clientOptions) readError(ctx context.Context, method, path string, err error) error {
	base, _ := o.baseURL()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the answer from %s did not arrive within %s (--timeout)", base, o.timeout)
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("%s %s%s: interrupted", method, base, path)
	}
	return fmt.Errorf("%s %s%s: reading the answer: %w", method, base, path, unwrapURLError(err))
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// unwrapURLError drops the *url.Error wrapper, whose message repeats the
// method and URL the caller already names.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// reportClientError prints err as one line and returns the exit status.
func reportClientError(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "metastore: %v\n", err)
	return exitFailure
}

// printJSON prints a response body as indented JSON.
func printJSON(stdout, stderr io.Writer, body []byte) int {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, body, "", "  "); err != nil {
		return reportClientError(stderr, fmt.Errorf("answer is not JSON: %w", err))
	}
	buf.WriteByte('\n')
	_, err := stdout.Write(buf.Bytes())
	if err != nil {
		return reportClientError(stderr, err)
	}
	return exitOK
}

// decodeJSON decodes one JSON value from body into v.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
