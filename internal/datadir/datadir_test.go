package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewDirectoryGetsCurrentFormat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	info, fresh, err := Check(dir, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if !fresh || info.Format != Current || info.CreatedBy != "v1.0.0" || info.LastOpenedBy != "v1.0.0" {
		t.Fatalf("new dir: fresh=%v info=%+v", fresh, info)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Format != Current || got.CreatedBy != "v1.0.0" {
		t.Fatalf("recorded %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}

func TestReopenRecordsLastRelease(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Check(dir, "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	info, fresh, err := Check(dir, "v1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if fresh || info.CreatedBy != "v1.0.0" || info.LastOpenedBy != "v1.1.0" {
		t.Fatalf("reopen: fresh=%v info=%+v", fresh, info)
	}
	if got, _ := Read(dir); got.LastOpenedBy != "v1.1.0" {
		t.Fatalf("last_opened_by not recorded: %+v", got)
	}
}

// Data without a FORMAT file was written by a format-1 release; it is
// recorded as format 1 and upgraded from there.
func TestDataWithoutFormatFileIsFormatOne(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fsm.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	info, fresh, err := Check(dir, "v1.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if fresh || info.Format != Current || info.CreatedBy != "unrecorded" {
		t.Fatalf("pre-format data: fresh=%v info=%+v", fresh, info)
	}
	if got, err := Read(dir); err != nil || got.Format != Current {
		t.Fatalf("format file not written: %+v %v", got, err)
	}
}

// Format 1 to 2 changes no file: a raft-boltdb log stays where it is.
func TestFormatOneKeepsItsRaftDB(t *testing.T) {
	dir := t.TempDir()
	if err := write(dir, Info{Format: 1, CreatedBy: "v-old"}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	raftDB := filepath.Join(dir, "raft", "raft.db")
	if err := os.WriteFile(raftDB, []byte("log"), 0o600); err != nil {
		t.Fatal(err)
	}
	info, _, err := Check(dir, "v-new")
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != 2 || info.CreatedBy != "v-old" {
		t.Fatalf("upgraded: %+v", info)
	}
	if got, err := os.ReadFile(raftDB); err != nil || string(got) != "log" {
		t.Fatalf("raft.db after the upgrade: %q, %v", got, err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "raft"))
	if len(entries) != 1 {
		t.Fatalf("raft/ holds %d entries after the upgrade, want raft.db alone", len(entries))
	}
}

func TestNewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	future := Info{Format: Current + 1, CreatedBy: "v9.0.0", LastOpenedBy: "v9.0.0"}
	if err := write(dir, future); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, FileName))
	_, _, err := Check(dir, "v1.0.0")
	if !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("newer format: err = %v, want ErrNewerFormat", err)
	}
	for _, want := range []string{dir, "v9.0.0", "v1.0.0", "newer release"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	after, _ := os.ReadFile(filepath.Join(dir, FileName))
	if string(before) != string(after) {
		t.Fatal("a refused directory's format file was rewritten")
	}
}

func TestCorruptFormatFileRefused(t *testing.T) {
	for name, content := range map[string]string{
		"not json":    "format=1",
		"zero format": `{"format":0}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := Check(dir, "v1.0.0"); err == nil || !strings.Contains(err.Error(), FileName) {
				t.Fatalf("corrupt format file: err = %v, want an error naming %s", err, FileName)
			}
		})
	}
}

func TestMigrationsRunInOrder(t *testing.T) {
	savedM, savedC := migrations, current
	defer func() { migrations, current = savedM, savedC }()
	current = 3
	var ran []int
	step := func(from int) migration {
		return migration{From: from, Apply: func(dir string) error {
			// Each step sees the format recorded by the previous one.
			if info, err := Read(dir); err != nil || info.Format != from {
				t.Errorf("step from %d: recorded %+v, %v", from, info, err)
			}
			ran = append(ran, from)
			return nil
		}}
	}
	migrations = []migration{step(2), step(1)}
	dir := t.TempDir()
	if err := write(dir, Info{Format: 1, CreatedBy: "old"}); err != nil {
		t.Fatal(err)
	}
	info, _, err := Check(dir, "v-new")
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != 3 || len(ran) != 2 || ran[0] != 1 || ran[1] != 2 || info.CreatedBy != "old" {
		t.Fatalf("migration: info=%+v ran=%v", info, ran)
	}
	if got, _ := Read(dir); got.Format != 3 || got.LastOpenedBy != "v-new" {
		t.Fatalf("recorded after migration: %+v", got)
	}
}

func TestFailedMigrationResumes(t *testing.T) {
	savedM, savedC := migrations, current
	defer func() { migrations, current = savedM, savedC }()
	current = 3
	boom := errors.New("disk on fire")
	fail := true
	var ran []int
	migrations = []migration{
		{From: 1, Apply: func(string) error { ran = append(ran, 1); return nil }},
		{From: 2, Apply: func(string) error {
			if fail {
				return boom
			}
			ran = append(ran, 2)
			return nil
		}},
	}
	dir := t.TempDir()
	if err := write(dir, Info{Format: 1, CreatedBy: "old"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Check(dir, "v-new"); !errors.Is(err, boom) || !strings.Contains(err.Error(), "from format 2") {
		t.Fatalf("failing step: err = %v", err)
	}
	if got, _ := Read(dir); got.Format != 2 {
		t.Fatalf("after a failed step the last completed one must be recorded: %+v", got)
	}
	fail = false
	info, _, err := Check(dir, "v-new")
	if err != nil || info.Format != 3 {
		t.Fatalf("resume: %+v %v", info, err)
	}
	if len(ran) != 2 || ran[0] != 1 || ran[1] != 2 {
		t.Fatalf("steps run %v, want [1 2] (step 1 not repeated)", ran)
	}
}

func TestMissingMigrationRefused(t *testing.T) {
	savedM, savedC := migrations, current
	defer func() { migrations, current = savedM, savedC }()
	current, migrations = 2, nil
	dir := t.TempDir()
	if err := write(dir, Info{Format: 1, CreatedBy: "old"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Check(dir, "v-new"); err == nil || !strings.Contains(err.Error(), "intermediate release") {
		t.Fatalf("no step: err = %v", err)
	}
}
