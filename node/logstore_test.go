package node

import (
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// failingLog is a log store whose writes fail with err.
type failingLog struct {
	*raft.InmemStore
	err error
}

func (f failingLog) StoreLogs([]*raft.Log) error   { return f.err }
func (f failingLog) StoreLog(*raft.Log) error      { return f.err }
func (f failingLog) DeleteRange(_, _ uint64) error { return f.err }

// TestLogStoreStopsOnWriteError: a failed append or compaction of the Raft
// log stops the member (a panic the consistency suite expects for EIO),
// except on a full file system, where Raft gets the error and steps down.
func TestLogStoreStopsOnWriteError(t *testing.T) {
	eio := &fs.PathError{Op: "write", Path: "/data/raft/raft.db", Err: syscall.EIO}
	enospc := &fs.PathError{Op: "write", Path: "/data/raft/raft.db", Err: syscall.ENOSPC}
	writes := map[string]func(raft.LogStore) error{
		"StoreLog":    func(s raft.LogStore) error { return s.StoreLog(&raft.Log{Index: 1}) },
		"StoreLogs":   func(s raft.LogStore) error { return s.StoreLogs([]*raft.Log{{Index: 1}}) },
		"DeleteRange": func(s raft.LogStore) error { return s.DeleteRange(1, 5) },
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			if err := write(stopOnWriteError{LogStore: raft.NewInmemStore()}); err != nil {
				t.Fatalf("a write that succeeds: %v", err)
			}
			if err := write(stopOnWriteError{LogStore: failingLog{raft.NewInmemStore(), enospc}}); err != enospc {
				t.Fatalf("a full file system: got %v, want the error returned", err)
			}
			msg := func() (msg string) {
				defer func() { msg = fmt.Sprint(recover()) }()
				_ = write(stopOnWriteError{LogStore: failingLog{raft.NewInmemStore(), eio}})
				return "no panic"
			}()
			if !strings.HasPrefix(msg, "node: Raft log ") || !strings.HasSuffix(msg, ": input/output error") {
				t.Fatalf("EIO: got %q, want a panic ending with the error", msg)
			}
		})
	}
}
