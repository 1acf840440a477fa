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
