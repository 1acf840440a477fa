package wire

import (
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestRuleStatus(t *testing.T) {
	for code, want := range map[Code]int{
		CodeInvalid:         http.StatusBadRequest,
		CodeNotFound:        http.StatusNotFound,
		CodeFenced:          http.StatusConflict,
		CodePayloadTooLarge: http.StatusRequestEntityTooLarge,
		CodeBlobGone:        http.StatusConflict,
		"some_future_code":  http.StatusConflict,
	} {
		if got := RuleStatus(code); got != want {
			t.Errorf("RuleStatus(%s) = %d, want %d", code, got, want)
		}
	}
}

func TestRuleErrorMatchesItsSentinel(t *testing.T) {
	err := Errorf(CodeFenced, "generation", "generation %d is not current", 3)
	if !errors.Is(err, ErrFenced) || errors.Is(err, ErrConflict) {
		t.Fatalf("errors.Is: fenced %v conflict %v", errors.Is(err, ErrFenced), errors.Is(err, ErrConflict))
	}
	if got, want := err.Error(), "fenced: generation: generation 3 is not current"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestCapsJSON(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: `[]`, want: `[]`},
		{in: `["state","input","incremental"]`, want: `["input","state","incremental"]`},
		{in: `["incremental"]`, wantErr: "incremental requires state"},
		{in: `["input","input"]`, wantErr: "listed twice"},
		{in: `["disk"]`, wantErr: "unknown capability"},
		{in: `"input"`, wantErr: "list of names"},
	} {
		var c Caps
		err := json.Unmarshal([]byte(tc.in), &c)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		out, _ := json.Marshal(c)
		if string(out) != tc.want {
			t.Errorf("%s: encodes as %s, want %s", tc.in, out, tc.want)
		}
		if !c.Valid() {
			t.Errorf("%s: not Valid", tc.in)
		}
	}
	if Caps(1 << 6).Valid() {
		t.Error("an undefined flag is Valid")
	}
}

func TestDurationJSON(t *testing.T) {
	out, _ := json.Marshal(Duration(90 * time.Second))
	if string(out) != `"1m30s"` {
		t.Fatalf("90s encodes as %s", out)
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"250ms"`), &d); err != nil || d != Duration(250*time.Millisecond) {
		t.Fatalf("250ms decodes as %v, %v", time.Duration(d), err)
	}
	if err := json.Unmarshal([]byte(`30`), &d); err == nil {
		t.Fatal("a number decodes as a duration")
	}
}

func TestShapeChecks(t *testing.T) {
	var re *RuleError
	if err := CheckID("job", "../etc"); !errors.As(err, &re) || re.Code != CodeInvalid || re.Field != "job" {
		t.Errorf("CheckID(../etc) = %v", err)
	}
	if err := CheckID("job", "orders-1"); err != nil {
		t.Errorf("CheckID(orders-1) = %v", err)
	}
	if err := CheckText("reason", "line\nbreak"); err == nil {
		t.Error("CheckText accepts a control character")
	}
	if err := CheckText("reason", strings.Repeat("x", MaxReasonLen+1)); err == nil {
		t.Error("CheckText accepts a text above MaxReasonLen")
	}
	if err := (JobConfig{}).WithDefaults().Validate(); err != nil {
		t.Errorf("the default config is invalid: %v", err)
	}
	if err := (JobConfig{Retained: 1001}).WithDefaults().Validate(); !errors.As(err, &re) || re.Field != "config.retained" {
		t.Errorf("retained 1001: %v", err)
	}
}

// TestShapeBounds: each bound of a job's config, of an id and of free
// text, at the value it allows and the first it refuses.
func TestShapeBounds(t *testing.T) {
	cfg := func(f func(*JobConfig)) JobConfig {
		c := JobConfig{}.WithDefaults()
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name  string
		c     JobConfig
		field string // "" : valid
	}{
		{"retained 1", cfg(func(c *JobConfig) { c.Retained = 1 }), ""},
		{"retained 1000", cfg(func(c *JobConfig) { c.Retained = 1000 }), ""},
		{"retained -1", cfg(func(c *JobConfig) { c.Retained = -1 }), "config.retained"},
		{"retained 1001", cfg(func(c *JobConfig) { c.Retained = 1001 }), "config.retained"},
		{"ack_timeout 100ms", cfg(func(c *JobConfig) { c.AckTimeout = Duration(100 * time.Millisecond) }), ""},
		{"ack_timeout 168h", cfg(func(c *JobConfig) { c.AckTimeout = Duration(7 * 24 * time.Hour) }), ""},
		{"ack_timeout 99ms", cfg(func(c *JobConfig) { c.AckTimeout = Duration(99 * time.Millisecond) }), "config.ack_timeout"},
		{"ack_timeout over 168h", cfg(func(c *JobConfig) { c.AckTimeout = Duration(7*24*time.Hour + time.Second) }), "config.ack_timeout"},
		{"history 1", cfg(func(c *JobConfig) { c.History = 1 }), ""},
		{"history 10000", cfg(func(c *JobConfig) { c.History = 10000 }), ""},
		{"history -1", cfg(func(c *JobConfig) { c.History = -1 }), "config.history"},
		{"history 10001", cfg(func(c *JobConfig) { c.History = 10001 }), "config.history"},
	} {
		err := tc.c.Validate()
		var re *RuleError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.field != "" && (!errors.As(err, &re) || re.Code != CodeInvalid || re.Field != tc.field):
			t.Errorf("%s: %v, want invalid_argument naming %s", tc.name, err, tc.field)
		}
	}
	if err := CheckID("task", strings.Repeat("a", 128)); err != nil {
		t.Errorf("an id of 128 bytes: %v", err)
	}
	if err := CheckID("task", strings.Repeat("a", 129)); err == nil {
		t.Error("an id of 129 bytes passed")
	}
	for _, text := range []string{"del\x7f", "bad \ufffd utf-8", string([]byte{'a', 0xff})} {
		if err := CheckText("reason", text); err == nil {
			t.Errorf("CheckText accepts %q", text)
		}
	}
	if err := CheckText("reason", strings.Repeat("x", MaxReasonLen)); err != nil {
		t.Errorf("a text of MaxReasonLen bytes: %v", err)
	}
}

// TestDependencies keeps the package free of everything but the standard
// library and package manifests.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages", len(deps))
	}
	for _, d := range deps {
		first, _, _ := strings.Cut(d, "/")
		if !strings.Contains(first, ".") {
			continue // the standard library
		}
		if d != "github.com/metastore/metastore/wire" && d != "github.com/metastore/metastore/manifests" {
			t.Errorf("package wire depends on %s", d)
		}
	}
}
