package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeNode answers the client commands' requests and records them.
type fakeNode struct {
	mu sync.Mutex
	// requests holds "METHOD /path", uris the request URIs with their
	// query, bodies the JSON bodies (nil without one).
	requests []string
	uris     []string
	bodies   []map[string]any
	routes   map[string]func(w http.ResponseWriter)
}

func newFakeNode(t *testing.T, routes map[string]func(w http.ResponseWriter)) (*fakeNode, *httptest.Server) {
	t.Helper()
	f := &fakeNode{routes: routes}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.EscapedPath()
		var body map[string]any
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			if len(b) > 0 {
				if err := json.Unmarshal(b, &body); err != nil {
					t.Errorf("%s: body %q is not a JSON object: %v", key, b, err)
				}
			}
		}
		f.mu.Lock()
		f.requests = append(f.requests, key)
		f.uris = append(f.uris, r.Method+" "+r.URL.RequestURI())
		f.bodies = append(f.bodies, body)
		f.mu.Unlock()
		route, ok := f.routes[key]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no route `+key+`"}}`)
			return
		}
		route(w)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

// seen returns the request URIs (method, path and query) received so far.
func (f *fakeNode) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.uris...)
}

func answer(status int, body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// runCmd runs a command line in-process and returns its exit status and
// output.
func runCmd(args []string, vars map[string]string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := run(args, &stdout, &stderr, env(vars))
	return code, stdout.String(), stderr.String()
}

const membersJSON = `{"leader_id":"n1","members":[` +
	`{"id":"n1","raft_addr":"127.0.0.1:7071","http_addr":"127.0.0.1:7070","suffrage":"voter","leader":true},` +
	`{"id":"n2","raft_addr":"127.0.0.1:7081","http_addr":"","suffrage":"voter","leader":false}]}`

func TestMembersList(t *testing.T) {
	_, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/members": answer(200, membersJSON),
	})

	code, out, errOut := runCmd([]string{"members", "list", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows, got:\n%s", out)
	}
	for i, want := range []string{
		"ID RAFT ADDR HTTP ADDR SUFFRAGE LEADER",
		"n1 127.0.0.1:7071 127.0.0.1:7070 voter yes",
		"n2 127.0.0.1:7081 - voter -",
	} {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want {
			t.Errorf("line %d = %q, want %q", i, got, want)
		}
	}

	// --json prints the answer itself; the address may come from the
	// environment and may omit the scheme.
	code, out, errOut = runCmd([]string{"members", "list", "--json"}, map[string]string{"METASTORE_ADDR": strings.TrimPrefix(srv.URL, "http://")})
	if code != exitOK || errOut != "" {
		t.Fatalf("--json: exit %d, stderr %q", code, errOut)
	}
	var got, want any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	json.Unmarshal([]byte(membersJSON), &want)
	if !jsonEqual(got, want) {
		t.Errorf("--json output = %s, want %s", out, membersJSON)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestMembersAddRemove(t *testing.T) {
	f, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"POST /v1/members":      answer(200, `{"added":"n4","members":[{"id":"n4","raft_addr":"127.0.0.1:7101","suffrage":"voter"}]}`),
		"DELETE /v1/members/n4": answer(200, `{"removed":"n4","members":[]}`),
	})

	code, out, errOut := runCmd([]string{"members", "add", "n4", "--raft-addr", "127.0.0.1:7101", "--http-addr", "127.0.0.1:7100", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("add: exit %d, stderr %q", code, errOut)
	}
	if !strings.HasPrefix(out, "added member n4 ") || !strings.Contains(out, "127.0.0.1:7101") {
		t.Errorf("add: output %q does not describe the new member", out)
	}
	code, _, errOut = runCmd([]string{"members", "remove", "--addr", srv.URL, "n4"}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("remove: exit %d, stderr %q", code, errOut)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"POST /v1/members", "DELETE /v1/members/n4"}; strings.Join(f.requests, "|") != strings.Join(want, "|") {
		t.Errorf("requests = %q, want %q", f.requests, want)
	}
	wantBody := map[string]string{"id": "n4", "raft_addr": "127.0.0.1:7101", "http_addr": "127.0.0.1:7100"}
	if !jsonEqual(f.bodies[0], wantBody) {
		t.Errorf("add body = %v, want %v", f.bodies[0], wantBody)
	}
}

func TestStatus(t *testing.T) {
	_, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"GET /v1/status": answer(200, `{"id":"n2","state":"follower","leader_id":"n1","leader_http_addr":"127.0.0.1:7070",`+
			`"term":3,"applied_index":18446744073709551615,"members":[{"id":"n1","suffrage":"voter","leader":true}]}`),
	})
	code, out, errOut := runCmd([]string{"status", "--addr", srv.URL}, nil)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"n2", "follower", "n1 (http 127.0.0.1:7070, raft -)", "18446744073709551615", "SUFFRAGE"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output does not contain %q:\n%s", want, out)
		}
	}
}

func TestClientErrors(t *testing.T) {
	_, srv := newFakeNode(t, map[string]func(http.ResponseWriter){
		"POST /v1/members": answer(409, `{"error":{"code":"conflict","field":"raft_addr","message":"address 127.0.0.1:7071 belongs to n1"}}`),
		"GET /v1/status":   answer(502, "upstream broke\nsecond line"),
	})
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"api error", []string{"members", "add", "n4", "--raft-addr", "127.0.0.1:7071", "--http-addr", "127.0.0.1:7100", "--addr", srv.URL},
			exitFailure, "metastore: conflict: address 127.0.0.1:7071 belongs to n1\n"},
		{"not json", []string{"status", "--addr", srv.URL},
			exitFailure, "metastore: GET " + srv.URL + "/v1/status: 502 Bad Gateway: upstream broke\n"},
		{"refused", []string{"status", "--addr", closed},
			exitFailure, "metastore: cannot connect to http://" + closed + ": connection refused (is 'metastore serve' running there?)\n"},
		{"bad addr", []string{"members", "list", "--addr", "ftp://x"},
			exitFailure, "metastore: --addr \"ftp://x\" is not an http(s) URL or host:port\n"},
		{"missing id", []string{"members", "remove", "--addr", srv.URL},
			exitUsage, ""},
		{"missing raft addr", []string{"members", "add", "n4", "--http-addr", "x:1"},
			exitUsage, ""},
		{"no subcommand", []string{"members"}, exitUsage, ""},
		{"unknown subcommand", []string{"members", "promote", "n4"}, exitUsage, ""},
		{"unknown flag", []string{"status", "--verbose"}, exitUsage, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCmd(tc.args, nil)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errOut)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "metastore: ") {
				t.Errorf("stderr = %q, want one line starting with \"metastore: \"", errOut)
			}
			if tc.want != "" && errOut != tc.want {
				t.Errorf("stderr = %q, want %q", errOut, tc.want)
			}
		})
	}
}

func TestParseInterleaved(t *testing.T) {
	fs, o := newClientFlags("x", env(nil))
	pos, err := parseInterleaved(fs, []string{"a", "--json", "b", "--addr", "h:1", "--", "--c"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pos, " ") != "a b --c" || !o.json || o.addr != "h:1" {
		t.Errorf("pos = %q, json = %v, addr = %q", pos, o.json, o.addr)
	}
}
