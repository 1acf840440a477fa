package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/config"
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
