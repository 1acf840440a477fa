package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/metastore/metastore/node"
)

// defaultAddr is the node the client commands talk to by default.
const defaultAddr = "http://127.0.0.1:7070"

// maxResponseBytes bounds what the client reads of one response.
const maxResponseBytes = 64 << 20

// clientOptions are the flags every client command takes.
type clientOptions struct {
	addr    string
	json    bool
	timeout time.Duration
}

// newClientFlags returns the flag set of a client command, with --addr
// defaulting to METASTORE_ADDR when that is set.
func newClientFlags(name string, getenv func(string) string) (*flag.FlagSet, *clientOptions) {
	o := &clientOptions{addr: defaultAddr}
	if v := getenv(envName("addr")); v != "" {
		o.addr = v
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.addr, "addr", o.addr, "HTTP address of a metastore node ["+envName("addr")+"]")
	fs.BoolVar(&o.json, "json", false, "print the response as JSON")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the answer")
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

func runStatus(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs, o := newClientFlags("status", getenv)
	if _, code, ok := parseClientArgs(fs, args, "status [--addr URL] [--json]", 0, stdout, stderr); !ok {
		return code
	}
	body, err := o.do(http.MethodGet, "/v1/status", nil)
	if err != nil {
		return reportClientError(stderr, err)
	}
	if o.json {
		return printJSON(stdout, stderr, body)
	}
	var st node.Status
	if err := decodeJSON(body, &st); err != nil {
		return reportClientError(stderr, fmt.Errorf("status from %s: %w", o.addr, err))
	}
	printStatus(stdout, st)
	return exitOK
}

func runMembers(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "metastore: members: want a subcommand: list, add or remove\n")
		return exitUsage
	}
	switch args[0] {
	case "list":
		return runMembersList(args[1:], stdout, stderr, getenv)
	case "add":
		return runMembersAdd(args[1:], stdout, stderr, getenv)
	case "remove":
		return runMembersRemove(args[1:], stdout, stderr, getenv)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, "Usage:\n  metastore members list [--addr URL] [--json]\n  metastore members add ID --raft-addr HOST:PORT --http-addr HOST:PORT [--addr URL] [--json]\n  metastore members remove ID [--addr URL] [--json]\n")
		return exitOK
	default:
		fmt.Fprintf(stderr, "metastore: members: unknown subcommand %q (want list, add or remove)\n", args[0])
		return exitUsage
	}
}

func runMembersList(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs, o := newClientFlags("members list", getenv)
	if _, code, ok := parseClientArgs(fs, args, "members list [--addr URL] [--json]", 0, stdout, stderr); !ok {
		return code
	}
	body, err := o.do(http.MethodGet, "/v1/members", nil)
	if err != nil {
		return reportClientError(stderr, err)
	}
	if o.json {
		return printJSON(stdout, stderr, body)
	}
	return printMembersAnswer(stdout, stderr, o.addr, body)
}

func runMembersAdd(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs, o := newClientFlags("members add", getenv)
	var raftAddr, httpAddr string
	fs.StringVar(&raftAddr, "raft-addr", "", "Raft address (host:port) the new member advertises")
	fs.StringVar(&httpAddr, "http-addr", "", "HTTP address (host:port) the new member advertises")
	const synopsis = "members add ID --raft-addr HOST:PORT --http-addr HOST:PORT [--addr URL] [--json]"
	pos, code, ok := parseClientArgs(fs, args, synopsis, 1, stdout, stderr)
	if !ok {
		return code
	}
	for _, req := range []struct{ name, v string }{{"raft-addr", raftAddr}, {"http-addr", httpAddr}} {
		if req.v == "" {
			fmt.Fprintf(stderr, "metastore: members add: --%s is required (usage: metastore %s)\n", req.name, synopsis)
			return exitUsage
		}
	}
	id := pos[0]
	body, err := o.do(http.MethodPost, "/v1/members", map[string]string{
		"id":        id,
		"raft_addr": raftAddr,
		"http_addr": httpAddr,
	})
	if err != nil {
		return reportClientError(stderr, err)
	}
	if o.json {
		return printJSON(stdout, stderr, body)
	}
	fmt.Fprintf(stdout, "added member %s (raft %s, http %s)\n\n", id, raftAddr, httpAddr)
	return printMembersAnswer(stdout, stderr, o.addr, body)
}

func runMembersRemove(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs, o := newClientFlags("members remove", getenv)
	pos, code, ok := parseClientArgs(fs, args, "members remove ID [--addr URL] [--json]", 1, stdout, stderr)
	if !ok {
		return code
	}
	id := pos[0]
	body, err := o.do(http.MethodDelete, "/v1/members/"+url.PathEscape(id), nil)
	if err != nil {
		return reportClientError(stderr, err)
	}
	if o.json {
		return printJSON(stdout, stderr, body)
	}
	fmt.Fprintf(stdout, "removed member %s\n\n", id)
	return printMembersAnswer(stdout, stderr, o.addr, body)
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
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--addr %q is not an http(s) URL or host:port", o.addr)
	}
	return u, nil
}

// do sends one request and returns the body of a 2xx answer. An error
// answer of the API comes back as *apiError.
func (o *clientOptions) do(method, path string, reqBody any) ([]byte, error) {
	base, err := o.baseURL()
	if err != nil {
		return nil, err
	}
	target := base.String() + path
	var rd io.Reader
	if reqBody != nil {
		b, err := json.Marshal(reqBody)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("cannot connect to %s: connection refused (is 'metastore serve' running there?)", base)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("no answer from %s within %s", base, o.timeout)
		default:
			return nil, fmt.Errorf("%s %s: %w", method, target, unwrapURLError(err))
		}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, target, err)
	}
	if resp.StatusCode/100 == 2 {
		return body, nil
	}
	var envelope struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(body, &envelope) == nil && envelope.Error != nil && envelope.Error.Code != "" {
		return nil, envelope.Error
	}
	// Not an API error (a proxy in the way, a crash): show its first line.
	text, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	return nil, fmt.Errorf("%s %s: %s: %s", method, target, resp.Status, text)
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

// printMembersAnswer prints the member table of an answer that carries
// {"members":[...]} (members list, add and remove).
func printMembersAnswer(stdout, stderr io.Writer, addr string, body []byte) int {
	var answer struct {
		Members []node.MemberStatus `json:"members"`
	}
	if err := decodeJSON(body, &answer); err != nil {
		return reportClientError(stderr, fmt.Errorf("members from %s: %w", addr, err))
	}
	printMembers(stdout, answer.Members)
	return exitOK
}

func printMembers(w io.Writer, members []node.MemberStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tHTTP ADDR\tSUFFRAGE\tLEADER")
	for _, m := range members {
		leader := "-"
		if m.Leader {
			leader = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, orDash(m.RaftAddr), orDash(m.HTTPAddr), orDash(m.Suffrage), leader)
	}
	tw.Flush()
}

func printStatus(w io.Writer, st node.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\t%s\n", st.ID)
	fmt.Fprintf(tw, "state\t%s\n", orDash(st.State))
	leader := "none known"
	if st.LeaderID != "" {
		leader = fmt.Sprintf("%s (http %s, raft %s)", st.LeaderID, orDash(st.LeaderHTTPAddr), orDash(st.LeaderRaftAddr))
	}
	fmt.Fprintf(tw, "leader\t%s\n", leader)
	fmt.Fprintf(tw, "term\t%d\n", st.Term)
	fmt.Fprintf(tw, "commit index\t%d\n", st.CommitIndex)
	fmt.Fprintf(tw, "applied index\t%d\n", st.AppliedIndex)
	fmt.Fprintf(tw, "last log index\t%d\n", st.LastLogIndex)
	fmt.Fprintf(tw, "last snapshot index\t%d\n", st.LastSnapshotIndex)
	tw.Flush()
	fmt.Fprintln(w)
	printMembers(w, st.Members)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
