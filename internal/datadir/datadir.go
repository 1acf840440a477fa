// Package datadir records and checks the format of a member's data
// directory, so that a release never misreads data written by another.
//
// The directory holds a FORMAT file (JSON) naming the layout version of
// everything in it: the Raft log (raft/wal/, hashicorp/raft-wal segment
// files, or raft/raft.db, raft-boltdb), the snapshots (snapshots/, hashicorp/raft's file store, each
// holding a state machine snapshot that starts with its own magic and schema
// version) and the state machine (fsm.db, whose meta bucket carries the same
// schema version). Check runs before any of them is opened:
//
//   - a new or empty directory gets the current format;
//   - a directory written before the FORMAT file existed has format 1 (the
//     layout was the same) and gets the file;
//   - a directory of an older format is migrated step by step, each step
//     recorded before the next, so a crash in the middle resumes;
//   - a directory of a newer format is refused: the release that wrote it
//     may store things this one would misread or silently drop.
//
// The file also records which release created the directory and which
// opened it last, for operators and for rolling upgrades (docs/operations.md).
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Current is the data directory format this build writes.
//
// Format 1: raft/raft.db (raft-boltdb v2), snapshots/ (raft file snapshot
// store; payload = "metastore-snapshot" magic + fsm schema version + bbolt
// file), fsm.db with its fsm.db.state marker, blobs/ for the local blob
// store.
//
// Format 2: as format 1, but the Raft log and stable store may instead be
// raft/wal/ (hashicorp/raft-wal: segment files and wal-meta.db), which a
// release of format 1 does not know: it would start with an empty log
// beside the state machine. A directory holds one of the two; new ones get
// the wal (node/raftstore.go). Upgrading from format 1 changes no file:
// raft/raft.db stays, and is used.
const Current = 2

// FileName is the name of the format file in the data directory.
const FileName = "FORMAT"

// Info is the content of the FORMAT file.
type Info struct {
	// Format is the layout version of the directory.
	Format int `json:"format"`
	// CreatedBy is the release that created the directory (or first
	// recorded its format).
	CreatedBy string `json:"created_by"`
	// CreatedAt is when that happened.
	CreatedAt time.Time `json:"created_at"`
	// LastOpenedBy is the release that opened the directory last.
	LastOpenedBy string `json:"last_opened_by"`
}

// ErrNewerFormat is returned (wrapped) for a directory written by a newer
// release.
var ErrNewerFormat = errors.New("data directory written by a newer release")

// migration upgrades a directory from format From to From+1.
type migration struct {
	From  int
	Apply func(dir string) error
}

// migrations lists the steps from each older format to the next; a format
// without a step cannot be upgraded by this build.
var migrations = []migration{
	// Format 1 to 2 only records that the directory may now hold a
	// raft-wal log; its raft.db is kept and used.
	{From: 1, Apply: func(string) error { return nil }},
}

// current is Current; tests raise it to exercise migrations.
var current = Current

// contents are the entries whose presence means the directory already
// holds a member's data.
var contents = []string{"raft", "snapshots", "fsm.db"}

// Check makes sure dir holds data of the current format, creating the
// directory and its FORMAT file if needed, migrating older formats and
// refusing newer ones. release names the running build (recorded in the
// file). It returns the recorded information and whether the directory
// was new.
func Check(dir, release string) (Info, bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Info{}, false, fmt.Errorf("datadir: create %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	info, err := read(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		existing, err := hasContents(dir)
		if err != nil {
			return Info{}, false, err
		}
		// Data without a FORMAT file was written before the file existed,
		// by releases whose layout is format 1.
		info = Info{Format: current, CreatedBy: release, CreatedAt: time.Now().UTC()}
		if existing {
			info.Format = 1
			info.CreatedBy = "unrecorded"
		}
		info.LastOpenedBy = release
		if info.Format == current {
			if err := write(dir, info); err != nil {
				return Info{}, false, err
			}
			return info, !existing, nil
		}
	case err != nil:
		return Info{}, false, err
	}

	if info.Format > current {
		return info, false, fmt.Errorf("datadir: %s has format %d (created by %s, last opened by %s); this release (%s) reads formats up to %d: run a newer release: %w",
			dir, info.Format, info.CreatedBy, info.LastOpenedBy, release, current, ErrNewerFormat)
	}
	for info.Format < current {
		step, ok := findMigration(info.Format)
		if !ok {
			return info, false, fmt.Errorf("datadir: %s has format %d; this release (%s) cannot upgrade it to %d: upgrade through an intermediate release",
				dir, info.Format, release, current)
		}
		if err := step.Apply(dir); err != nil {
			return info, false, fmt.Errorf("datadir: upgrade %s from format %d: %w", dir, info.Format, err)
		}
		info.Format++
		info.LastOpenedBy = release
		if err := write(dir, info); err != nil {
			return info, false, err
		}
	}
	if info.LastOpenedBy != release {
		info.LastOpenedBy = release
		if err := write(dir, info); err != nil {
			return info, false, err
		}
	}
	return info, false, nil
}

func findMigration(from int) (migration, bool) {
	for _, m := range migrations {
		if m.From == from {
			return m, true
		}
	}
	return migration{}, false
}

// Read returns the FORMAT file of dir.
func Read(dir string) (Info, error) { return read(filepath.Join(dir, FileName)) }

func read(path string) (Info, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Info{}, err
	}
	var info Info
	if err := json.Unmarshal(raw, &info); err != nil {
		return Info{}, fmt.Errorf("datadir: %s is not a format file: %w", path, err)
	}
	if info.Format < 1 {
		return Info{}, fmt.Errorf("datadir: %s names format %d; formats start at 1", path, info.Format)
	}
	return info, nil
}

func hasContents(dir string) (bool, error) {
	for _, name := range contents {
		_, err := os.Stat(filepath.Join(dir, name))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("datadir: %w", err)
		}
	}
	return false, nil
}

// write replaces the FORMAT file atomically and durably: a temporary file,
// synced, renamed over it, and the directory synced.
func write(dir string, info Info) error {
	raw, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	raw = append(raw, '\n')
	path := filepath.Join(dir, FileName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return fmt.Errorf("datadir: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("datadir: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("datadir: sync %s: %w", dir, err)
	}
	return nil
}
