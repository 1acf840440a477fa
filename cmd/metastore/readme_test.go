package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/metastore/metastore/config"
)

var update = flag.Bool("update", false, "rewrite the settings table in README.md")

const (
	readmePath = "../../README.md"
	ciRunPath  = "../../.ci/run"
	tableBegin = "<!-- BEGIN settings table"
	tableEnd   = "<!-- END settings table -->"
)

// settingsTable renders the settings table of README.md from the settings
// table of the binary and the defaults of config.DefaultConfig.
func settingsTable() string {
	var b strings.Builder
	b.WriteString("| Flag | Environment | Default | Meaning |\n")
	b.WriteString("|---|---|---|---|\n")
	def := config.DefaultConfig()
	for _, s := range settings {
		d := "(none)"
		if v := s.value(&def).String(); v != "" {
			d = "`" + v + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", s.name, envName(s.name), d, s.usage)
	}
	return b.String()
}

// TestREADMESettingsTable checks that README.md documents exactly the flags,
// environment variables and defaults of serve. Run with -update to rewrite
// the table.
func TestREADMESettingsTable(t *testing.T) {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	begin := bytes.Index(readme, []byte(tableBegin))
	end := bytes.Index(readme, []byte(tableEnd))
	if begin < 0 || end < begin {
		t.Fatalf("README.md has no %q ... %q section", tableBegin, tableEnd)
	}
	bodyStart := begin + bytes.IndexByte(readme[begin:], '\n') + 1
	got := string(readme[bodyStart:end])
	want := settingsTable()
	if got == want {
		return
	}
	if *update {
		out := append(append(append([]byte(nil), readme[:bodyStart]...), want...), readme[end:]...)
		if err := os.WriteFile(readmePath, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the settings table in %s", readmePath)
		return
	}
	t.Errorf("the settings table in README.md is out of date; run go test ./cmd/metastore -run TestREADMESettingsTable -update\n got:\n%s\nwant:\n%s", got, want)
}

// TestREADMETestCommand checks that README.md shows the test command that
// .ci/run runs.
func TestREADMETestCommand(t *testing.T) {
	ci, err := os.ReadFile(ciRunPath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^readonly TEST_CMD='([^']+)'$`).FindSubmatch(ci)
	if m == nil {
		t.Fatalf("%s does not define readonly TEST_CMD='...'", ciRunPath)
	}
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	section := readme
	if i := bytes.Index(readme, []byte("## Test it")); i >= 0 {
		section = readme[i:]
		if j := bytes.Index(section[1:], []byte("\n## ")); j >= 0 {
			section = section[:j+1]
		}
	} else {
		t.Fatal(`README.md has no "## Test it" section`)
	}
	if !bytes.Contains(section, []byte("\n    "+string(m[1])+"\n")) {
		t.Errorf("the \"Test it\" section of README.md does not show %q, the test command of .ci/run", m[1])
	}
}
