package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// browserRequest sends what a page in the operator's browser can send
// without asking the server first: any Host its DNS answers for, a
// "simple" Content-Type, and the Origin and Sec-Fetch-* headers the
// browser adds itself.
func browserRequest(t *testing.T, method, url, host, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Code == "" || env.Error.Message == "" {
		t.Fatalf("not a JSON error naming the problem: %s", body)
	}
	return env.Error.Code
}

// TestBrowserAttacks replays issue 13's second finding against the
// default store (no auth): a web page adding an unreachable voter with a
// cross-site text/plain POST, and a DNS-rebound page reading the
// snapshot. Both are refused, and the member set is unchanged; the
// store's own pages, the README's curl commands and an allowed origin
// still work.
func TestBrowserAttacks(t *testing.T) {
	m := testmember.StartSingle(t)
	self := strings.TrimPrefix(m.URL, "http://")
	voter := `{"id":"evil","raft_addr":"192.0.2.1:7071","http_addr":"192.0.2.1:7070"}`

	attacks := []struct {
		name, method, path, host, body string
		headers                        map[string]string
		status                         int
		code                           wire.Code
	}{
		{"cross-site text/plain POST /v1/members", "POST", "/v1/members", "", voter,
			map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
			http.StatusForbidden, "cross_origin_refused"},
		{"cross-site POST, Origin stripped (Sec-Fetch-Site only)", "POST", "/v1/members", "", voter,
			map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"},
			http.StatusForbidden, "cross_origin_refused"},
		{"same-site page on another port", "POST", "/v1/members", "", voter,
			map[string]string{"Content-Type": "text/plain", "Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"},
			http.StatusForbidden, "cross_origin_refused"},
		{"sandboxed page (Origin: null)", "POST", "/v1/members", "", voter,
			map[string]string{"Content-Type": "text/plain", "Origin": "null"},
			http.StatusForbidden, "cross_origin_refused"},
		{"same-origin browser request with text/plain", "POST", "/v1/members", "", voter,
			map[string]string{"Content-Type": "text/plain", "Origin": m.URL, "Sec-Fetch-Site": "same-origin"},
			http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"same-origin browser form POST (form type)", "POST", "/v1/members", "", voter,
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": m.URL, "Sec-Fetch-Site": "same-origin"},
			http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"same-origin browser POST without a Content-Type", "POST", "/v1/members", "", voter,
			map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"},
			http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"form POST without browser marks but text/plain", "POST", "/v1/members", "", voter,
			map[string]string{"Content-Type": "text/plain"},
			http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"DNS rebinding: GET /v1/snapshot with the attacker's Host", "GET", "/v1/snapshot", "rebind.evil.example:" + strings.Split(self, ":")[1], "",
			map[string]string{"Sec-Fetch-Site": "same-origin"},
			http.StatusMisdirectedRequest, "host_not_allowed"},
		{"DNS rebinding: POST /v1/members with the attacker's Host", "POST", "/v1/members", "rebind.evil.example", voter,
			map[string]string{"Content-Type": "application/json", "Origin": "http://rebind.evil.example"},
			http.StatusMisdirectedRequest, "host_not_allowed"},
		{"DNS rebinding posing as a forwarding member", "POST", "/v1/members", "rebind.evil.example", voter,
			map[string]string{"Content-Type": "application/json", "Origin": "http://rebind.evil.example", "X-Metastore-Forwarded-By": m.ID},
			http.StatusMisdirectedRequest, "host_not_allowed"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			status, body := browserRequest(t, a.method, m.URL+a.path, a.host, a.body, a.headers)
			if status != a.status {
				t.Fatalf("status %d, want %d: %s", status, a.status, body)
			}
			if code := errorCode(t, body); wire.Code(code) != a.code {
				t.Fatalf("code %q, want %q: %s", code, a.code, body)
			}
		})
	}
	members, err := m.FSM.Members()
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 || m.Node.Status().Members[0].ID != m.ID || len(m.Node.Status().Members) != 1 {
		t.Fatalf("the attacks changed the members: %+v", m.Node.Status().Members)
	}

	allowed := []struct {
		name, method, path, host, body string
		headers                        map[string]string
	}{
		{"README curl -d (form type, no Origin)", "PUT", "/v1/jobs/orders", "", `{"config": {"retained": 2}}`,
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", "User-Agent": "curl/8.5.0"}},
		{"Go client (application/json)", "PUT", "/v1/jobs/orders2", "", `{}`,
			map[string]string{"Content-Type": "application/json"}},
		{"console: same-origin GET", "GET", "/v1/jobs", "", "",
			map[string]string{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}},
		{"console: same-origin GET with Origin", "GET", "/v1/status", "", "",
			map[string]string{"Origin": m.URL, "Sec-Fetch-Site": "same-origin"}},
		{"localhost name", "GET", "/v1/status", "localhost:" + strings.Split(self, ":")[1], "", nil},
		{"typed URL (Sec-Fetch-Site: none)", "GET", "/v1/snapshot", "", "",
			map[string]string{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}},
	}
	for _, a := range allowed {
		t.Run(a.name, func(t *testing.T) {
			if status, body := browserRequest(t, a.method, m.URL+a.path, a.host, a.body, a.headers); status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
		})
	}
}

// TestAllowedOriginsAndHosts: the flags let a named origin and host in,
// and nothing else; "*" lets every origin and host in.
func TestAllowedOriginsAndHosts(t *testing.T) {
	m := testmember.StartSingleWith(t, func(c *config.Config) {
		c.AllowedOrigins = []string{"https://console.example.com"}
		c.AllowedHosts = []string{"metastore.internal"}
	})
	h := map[string]string{"Origin": "https://console.example.com", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}
	if status, body := browserRequest(t, "PUT", m.URL+"/v1/jobs/j", "metastore.internal", `{}`, h); status != http.StatusOK {
		t.Fatalf("allowed origin and host: %d %s", status, body)
	}
	h["Origin"] = "https://console.example.com.evil.example"
	if status, body := browserRequest(t, "PUT", m.URL+"/v1/jobs/j", "", `{}`, h); status != http.StatusForbidden {
		t.Fatalf("other origin: %d %s", status, body)
	}
	if status, body := browserRequest(t, "GET", m.URL+"/v1/status", "other.internal", "", nil); status != http.StatusMisdirectedRequest {
		t.Fatalf("other host: %d %s", status, body)
	}
	// Probes answer whatever the Host (load balancers send their own).
	if status, body := browserRequest(t, "GET", m.URL+"/readyz", "lb.internal", "", nil); status != http.StatusOK {
		t.Fatalf("/readyz: %d %s", status, body)
	}

	// "*" lets every origin and every host in (operations.md).
	wide := testmember.StartSingleWith(t, func(c *config.Config) {
		c.AllowedOrigins = []string{"*"}
		c.AllowedHosts = []string{"*"}
	})
	h = map[string]string{"Origin": "https://anything.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}
	if status, body := browserRequest(t, "PUT", wide.URL+"/v1/jobs/j", "any.example", `{}`, h); status != http.StatusOK {
		t.Fatalf("--allowed-origins '*' and --allowed-hosts '*': %d %s", status, body)
	}
	if status, body := browserRequest(t, "GET", wide.URL+"/v1/status", "", "", map[string]string{"Sec-Fetch-Site": "cross-site"}); status != http.StatusOK {
		t.Fatalf("--allowed-origins '*', a cross-site request without Origin: %d %s", status, body)
	}
}

// TestBrowserRequestsForwarded: the console's same-origin write to a
// follower is forwarded with its Host and Origin and passes the leader's
// checks; a cross-site one is refused by the follower.
func TestBrowserRequestsForwarded(t *testing.T) {
	ms := testmember.StartCluster(t, 3)
	leader := testmember.LeaderOf(ms)
	var follower *testmember.Member
	for _, m := range ms {
		if m != leader {
			follower = m
			break
		}
	}
	h := map[string]string{"Content-Type": "application/json", "Origin": follower.URL, "Sec-Fetch-Site": "same-origin"}
	if status, body := browserRequest(t, "PUT", follower.URL+"/v1/jobs/fwd", "", `{}`, h); status != http.StatusOK {
		t.Fatalf("same-origin write through a follower: %d %s", status, body)
	}
	h["Origin"], h["Sec-Fetch-Site"] = "https://evil.example", "cross-site"
	if status, body := browserRequest(t, "PUT", follower.URL+"/v1/jobs/fwd2", "", `{}`, h); status != http.StatusForbidden {
		t.Fatalf("cross-site write through a follower: %d %s", status, body)
	}
}
