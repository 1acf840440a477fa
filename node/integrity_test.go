package node

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/internal/boltcheck"
)

func makeSnapshot(t *testing.T, store *raft.FileSnapshotStore, index uint64, body string) string {
	t.Helper()
	sink, err := store.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

func TestSnapshotIntegrity(t *testing.T) {
	base := t.TempDir()
	store, err := raft.NewFileSnapshotStore(base, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "snapshots")
	old := makeSnapshot(t, store, 10, strings.Repeat("old state ", 1000))
	id := makeSnapshot(t, store, 20, strings.Repeat("new state ", 1000))
	if err := checkSnapshots(dir, store); err != nil {
		t.Fatalf("good snapshots: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "9-99-1.tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkSnapshots(dir, store); err != nil {
		t.Fatalf("a partial snapshot is not checked: %v", err)
	}

	// Flipped bytes in state.bin: found at start, and by Open while running.
	state := filepath.Join(dir, id, "state.bin")
	raw, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0xff
	if err := os.WriteFile(state, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if err := checkSnapshots(dir, store); !errors.As(err, &ce) || ce.Path != state || !errors.Is(err, boltcheck.ErrCorrupt) {
		t.Fatalf("flipped bytes: %v, want a CorruptError naming %s", err, state)
	}
	var recorded []string
	checked := checkedSnapshots{FileSnapshotStore: store, dir: dir, record: func(path, problem string) { recorded = append(recorded, path) }}
	if _, _, err := checked.Open(id); err == nil || len(recorded) != 1 || recorded[0] != state {
		t.Fatalf("Open of the corrupt snapshot: %v, recorded %v", err, recorded)
	}
	if _, rc, err := checked.Open(old); err != nil || len(recorded) != 1 {
		t.Fatalf("Open of a good snapshot: %v, recorded %v", err, recorded)
	} else {
		rc.Close()
	}

	// Truncated state.bin and unreadable meta.json.
	if err := os.Truncate(state, 100); err != nil {
		t.Fatal(err)
	}
	if err := checkSnapshots(dir, store); !errors.As(err, &ce) || ce.Path != state || !strings.Contains(ce.Problem, "100 bytes") {
		t.Fatalf("truncated: %v", err)
	}
	meta := filepath.Join(dir, old, "meta.json")
	if err := os.WriteFile(meta, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, id)); err != nil {
		t.Fatal(err)
	}
	if err := checkSnapshots(dir, store); !errors.As(err, &ce) || ce.Path != meta {
		t.Fatalf("garbage meta.json: %v", err)
	}
}

// A crash while Raft removes an old snapshot (one file after the other)
// leaves its directory with meta.json or state.bin only. With a newer
// snapshot whole, the member removes it at start and starts; a newest
// snapshot with a file missing is still damage.
func TestRemoveSnapshotsCutShortByACrash(t *testing.T) {
	for _, missing := range []string{"meta.json", "state.bin"} {
		t.Run(missing, func(t *testing.T) {
			base := t.TempDir()
			store, err := raft.NewFileSnapshotStore(base, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(base, "snapshots")
			old := makeSnapshot(t, store, 10, strings.Repeat("old state ", 1000))
			id := makeSnapshot(t, store, 20, strings.Repeat("new state ", 1000))
			if err := os.Remove(filepath.Join(dir, old, missing)); err != nil {
				t.Fatal(err)
			}
			if err := checkSnapshots(dir, store); err == nil {
				t.Fatal("the half-removed snapshot passes the check: the test proves nothing")
			}
			log := slog.New(slog.DiscardHandler)
			if err := removePartialSnapshots(dir, log); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, old)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the half-removed snapshot %s is still there: %v", old, err)
			}
			if err := checkSnapshots(dir, store); err != nil {
				t.Fatalf("after the removal: %v", err)
			}

			// The newest snapshot with a file missing is not a removal
			// cut short: it stays, and the check refuses it.
			if err := os.Remove(filepath.Join(dir, id, missing)); err != nil {
				t.Fatal(err)
			}
			if err := removePartialSnapshots(dir, log); err != nil {
				t.Fatal(err)
			}
			var ce *CorruptError
			if err := checkSnapshots(dir, store); !errors.As(err, &ce) {
				t.Fatalf("newest snapshot without %s: %v, want a CorruptError", missing, err)
			}
		})
	}
}
