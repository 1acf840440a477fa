package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/internal/testmember"
	"github.com/metastore/metastore/wire"
)

// member is one in-process member (internal/testmember).
type member = testmember.Member

func startSingle(t *testing.T) *member { return testmember.StartSingle(t) }

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testmember.WaitFor(t, timeout, what, cond)
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) index() uint64 {
	v, _ := strconv.ParseUint(r.header.Get(api.HeaderIndex), 10, 64)
	return v
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// apiError is the JSON error answer.
type apiError struct {
	Error struct {
		Code      wire.Code `json:"code"`
		Field     string    `json:"field"`
		Message   string    `json:"message"`
		Retryable bool      `json:"retryable"`
	} `json:"error"`
}

func do(t *testing.T, method, url string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// ok performs a request that must answer 200 and decodes the answer.
func ok(t *testing.T, method, url string, body any, out any) response {
	t.Helper()
	r := do(t, method, url, body)
	if r.status != http.StatusOK {
		t.Fatalf("%s %s: status %d: %s", method, url, r.status, r.body)
	}
	if out != nil {
		r.decode(t, out)
	}
	return r
}
