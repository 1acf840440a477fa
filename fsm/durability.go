package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Durability of the state machine file.
//
// The Raft log is the durable record of every acknowledged write: it is
// fsynced on a majority before a write is acknowledged, and the state
// machine is a function of the latest snapshot and the log after it. So the
// state machine file is written without fsync (bbolt NoSync): a process
// that dies, even by SIGKILL, leaves its writes in the operating system's
// page cache, and the file is intact at its last committed transaction,
// whose applied index tells Raft where to resume. Only a crash of the
// machine itself can lose or tear unsynced pages.
//
// A marker file next to the state machine records the machine's boot id
// while the file is open for writing (state "open") and is set "closed"
// after a clean close, which syncs the file first. At open, a marker that
// says "open" under another boot id means the machine went down while the
// file had unsynced writes: the file cannot be trusted. It is set aside
// (renamed *.discarded) and an empty one takes its place; the node then
// restores the latest Raft snapshot into it and Raft replays the log after
// it, rebuilding exactly the state every acknowledged write made.
//
// Where the boot id cannot be read (not Linux), the file is synced at
// every commit instead.

// EnvFaultBootIDFile names a file whose content a faultinject build takes
// as the machine's boot id when the file exists: the consistency suite
// changes it to stage a crash of the machine (jepsen/lossyfs drops the
// unsynced writes). Other builds ignore it.
const EnvFaultBootIDFile = "METASTORE_FAULT_BOOT_ID_FILE"

// markerSuffix names the marker file: the state machine's path plus it.
const markerSuffix = ".state"

type marker struct {
	BootID string    `json:"boot_id"`
	State  string    `json:"state"` // "open" or "closed"
	Time   time.Time `json:"time"`
}

const (
	markerOpen   = "open"
	markerClosed = "closed"
)

// bootID returns the id of the running boot of the machine, or "" when it
// cannot be known. Tests replace it.
var bootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// checkMarker decides whether the file at path can be trusted and sets it
// aside if not. It returns whether the file may be written without sync.
func checkMarker(path string, logger *slog.Logger) (noSync bool, err error) {
	boot := bootID()
	m, err := readMarker(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A new data directory, or one written by a release that synced
		// every commit: the file is as trustworthy as its last commit.
	case err != nil:
		return false, err
	case m.State == markerOpen && m.BootID != boot && !unsafeKeepUnsynced:
		if _, serr := os.Stat(path); serr == nil {
			aside := path + ".discarded"
			logger.Warn("the machine restarted while the state machine file had unsynced writes; setting it aside to rebuild it from the latest Raft snapshot and log",
				"file", path, "set_aside_as", aside, "written_since", m.Time, "previous_boot", m.BootID, "boot", boot)
			if err := os.Rename(path, aside); err != nil {
				return false, fmt.Errorf("fsm: set aside %s: %w", path, err)
			}
			if err := syncDir(filepath.Dir(path)); err != nil {
				return false, fmt.Errorf("fsm: set aside %s: %w", path, err)
			}
		}
	}
	return boot != "", nil
}

// setMarker records the file's state under the running boot, durably.
func setMarker(path, state string) error {
	raw, err := json.Marshal(marker{BootID: bootID(), State: state, Time: time.Now().UTC()})
	if err != nil {
		return err
	}
	tmp := path + markerSuffix + ".tmp"
	if err := writeSynced(tmp, strings.NewReader(string(raw)+"\n")); err != nil {
		return fmt.Errorf("fsm: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path+markerSuffix); err != nil {
		return fmt.Errorf("fsm: write marker: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func readMarker(path string) (marker, error) {
	var m marker
	raw, err := os.ReadFile(path + markerSuffix)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("fsm: marker %s%s: %w", path, markerSuffix, err)
	}
	return m, nil
}
