package node

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/fsm"
)

// TestShutdownWaitsForABackupRestore: a member shut down while a backup
// restore is in Raft stops Raft only once the restore has finished, so the
// restore succeeds and the member stops cleanly. (hashicorp/raft panics,
// "failed to restore snapshot: raft is already shutdown", when it is shut
// down while its state machine takes the backup, and answers
// ErrRaftShutdown when shut down as it hands the backup over.) A restore
// asked for once the member is shutting down is refused.
func TestShutdownWaitsForABackupRestore(t *testing.T) {
	n := startLeader(t, func(*config.Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	meta, prepared := preparedBackup(ctx, t, n)
	gate := &gatedReader{r: prepared, reading: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	release := func() { once.Do(func() { close(gate.release) }) }
	t.Cleanup(release)
	restored := make(chan error, 1)
	go func() { restored <- n.userRestore(meta, gate, time.Minute) }()
	select {
	case <-gate.reading: // Raft's main goroutine copies the backup
	case <-ctx.Done():
		t.Fatal("Raft never read the backup")
	}

	shutCtx, cancelShut := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShut()
	stopped := make(chan error, 1)
	go func() { stopped <- n.Shutdown(shutCtx) }()
	// Shutdown is either waiting for the restore (the fix) or has started
	// Raft's shutdown under it.
	for deadline := time.Now().Add(30 * time.Second); !n.waitingRestore.Load() && n.raft.State() != raft.Shutdown; {
		if time.Now().After(deadline) {
			t.Fatal("shutdown neither waits for the restore nor stops Raft")
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation
	}
	if err := n.userRestore(meta, prepared, time.Minute); !errors.Is(err, ErrShutdown) {
		t.Errorf("a restore asked for during the shutdown: %v, want ErrShutdown", err)
	}
	<-shutCtx.Done() // the shutdown's deadline passes while the restore runs
	release()
	if err := <-restored; err != nil {
		t.Errorf("restore during the shutdown: %v, want it finished", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestRestoreRefusedWithoutRoomForTwoCopies: a backup restore is refused
// with ErrDiskFull, before anything changes, when the data directory has
// less than two copies of the prepared state free beyond the minimum (Raft
// copies it into a snapshot, the state machine into the file it swaps in,
// and hashicorp/raft stops the process when that second copy fails); with
// the room it goes ahead.
func TestRestoreRefusedWithoutRoomForTwoCopies(t *testing.T) {
	n := startLeader(t, func(*config.Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var backup bytes.Buffer
	info, err := n.WriteBackup(ctx, &backup, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A member record written after the backup: a restore removes it.
	if _, _, err := n.Propose(ctx, fsm.CmdMemberUpsert, fsm.MemberUpsert{ID: "late", RaftAddr: "late.example:1", HTTPAddr: "late.example:2"}); err != nil {
		t.Fatal(err)
	}
	hasLate := func() bool {
		for _, m := range n.Status().Members {
			if m.ID == "late" {
				return true
			}
		}
		return false
	}
	setFree := func(free uint64) {
		n.disk.mu.Lock()
		n.disk.statfs = func(string) (uint64, error) { return free, nil }
		n.disk.mu.Unlock()
	}
	// The prepared state is about the backup's size: one copy's room is
	// not enough.
	setFree(n.disk.minFree + uint64(info.Size))
	_, err = n.RestoreBackup(ctx, bytes.NewReader(backup.Bytes()))
	var dfe *DiskFullError
	if !errors.Is(err, ErrDiskFull) || !errors.As(err, &dfe) || dfe.Cause == nil {
		t.Fatalf("restore with room for one copy: %v, want a *DiskFullError saying why", err)
	}
	if !hasLate() {
		t.Fatal("a refused restore changed the state: the record written after the backup is gone")
	}
	setFree(n.disk.minFree + 4*uint64(info.Size) + 1<<20)
	if _, err := n.RestoreBackup(ctx, bytes.NewReader(backup.Bytes())); err != nil {
		t.Fatalf("restore with room: %v", err)
	}
	if hasLate() {
		t.Fatal("the restore kept a record written after the backup")
	}
}
