package node

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/metastore/metastore/fsm"
)

// BackupFormat names the backup file format: one JSON line (BackupInfo),
// then Size bytes of a state machine snapshot whose SHA-256 is SHA256.
const BackupFormat = "metastore-backup"

// BackupVersion is the version of the backup format this build writes.
const BackupVersion = 1

// BackupInfo is the first line of a backup file.
type BackupInfo struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Index   uint64    `json:"index"`
	Term    uint64    `json:"term"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"`
	SHA256  string    `json:"sha256"`
	// SchemaVersion is the state machine's layout version.
	SchemaVersion int `json:"schema_version"`
}

// ErrBadBackup is a backup that cannot be restored: not a backup, a newer
// format, or content that does not match its hash. Nothing was changed.
var ErrBadBackup = errors.New("node: bad backup")

// WriteBackup takes a snapshot of the replicated state and writes it to w
// as a backup file. sized, when not nil, learns the backup's total length
// before its first byte is written.
func (n *Node) WriteBackup(ctx context.Context, w io.Writer, sized func(total int64)) (_ *BackupInfo, err error) {
	defer func() {
		// The snapshot or the spool file could not be written: the data
		// directory is full.
		if dfe := (*DiskFullError)(nil); isNoSpace(err) && !errors.As(err, &dfe) {
			err = n.disk.Full(err)
		}
	}()
	if n.closing.Load() {
		return nil, ErrShutdown
	}
	fut := n.raft.Snapshot()
	var meta *raft.SnapshotMeta
	var rc io.ReadCloser
	err = waitFuture(ctx, fut)
	switch {
	case err == nil:
		meta, rc, err = fut.Open()
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		// Nothing applied since the last snapshot: back that one up.
		metas, lerr := n.snaps.List()
		if lerr != nil || len(metas) == 0 {
			return nil, fmt.Errorf("node: no snapshot to back up (%v)", lerr)
		}
		meta, rc, err = n.checkedSnaps().Open(metas[0].ID)
	default:
		return nil, fmt.Errorf("node: snapshot for backup: %w", n.mapRaftError(err))
	}
	if err != nil {
		return nil, fmt.Errorf("node: open snapshot for backup: %w", err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(n.cfg.DataDir, "backup-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("node: backup: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(tmp, h), rc)
	if err != nil {
		return nil, fmt.Errorf("node: backup: %w", err)
	}
	info := &BackupInfo{Format: BackupFormat, Version: BackupVersion, Index: meta.Index, Term: meta.Term,
		Created: time.Now().UTC(), Size: size, SHA256: hex.EncodeToString(h.Sum(nil)), SchemaVersion: fsm.SchemaVersion}
	line, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	if sized != nil {
		sized(int64(len(line)) + 1 + size)
	}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return nil, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if _, err := io.Copy(w, tmp); err != nil {
		return nil, err
	}
	return info, nil
}

// ReadBackupInfo reads and checks the first line of a backup.
func ReadBackupInfo(br *bufio.Reader) (*BackupInfo, error) {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: no header line: %v", ErrBadBackup, err)
	}
	var info BackupInfo
	if err := json.Unmarshal(line, &info); err != nil || info.Format != BackupFormat {
		return nil, fmt.Errorf("%w: not a metastore backup", ErrBadBackup)
	}
	if info.Version > BackupVersion || info.SchemaVersion > fsm.SchemaVersion {
		return nil, fmt.Errorf("%w: backup format %d, schema %d; this build reads up to %d, %d", ErrBadBackup, info.Version, info.SchemaVersion, BackupVersion, fsm.SchemaVersion)
	}
	if info.Size <= 0 {
		return nil, fmt.Errorf("%w: size %d", ErrBadBackup, info.Size)
	}
	return &info, nil
}

// RestoreBackup replaces the whole replicated state with a backup: the
// leader checks the backup against its hash before anything changes, then
// installs it through Raft on every member.
func (n *Node) RestoreBackup(ctx context.Context, r io.Reader) (*BackupInfo, error) {
	if !n.IsLeader() {
		return nil, ErrNotLeader
	}
	br := bufio.NewReader(r)
	info, err := ReadBackupInfo(br)
	if err != nil {
		return nil, err
	}
	body, err := os.CreateTemp(n.cfg.DataDir, "restore-body-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("node: restore: %w", err)
	}
	defer os.Remove(body.Name())
	defer body.Close()
	h := sha256.New()
	got, err := io.Copy(io.MultiWriter(body, h), io.LimitReader(br, info.Size+1))
	if err != nil {
		return nil, fmt.Errorf("node: restore: read backup: %w", err)
	}
	if got != info.Size || hex.EncodeToString(h.Sum(nil)) != info.SHA256 {
		return nil, fmt.Errorf("%w: content does not match its header (%d bytes, want %d; or hash differs): the file is truncated or corrupt", ErrBadBackup, got, info.Size)
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	prepared, err := os.CreateTemp(n.cfg.DataDir, "restore-prepared-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("node: restore: %w", err)
	}
	defer os.Remove(prepared.Name())
	defer prepared.Close()
	if _, err := fsm.PrepareRestore(body, prepared, n.cfg.DataDir); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBackup, err)
	}
	size, err := prepared.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	if _, err := prepared.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	// Raft copies the backup into a snapshot of its own, and the state
	// machine into the file it swaps in; hashicorp/raft stops the process
	// when the state machine cannot take a restore, so the space for both
	// copies is checked first.
	if err := n.disk.Room(2*uint64(size), fmt.Sprintf("restoring a backup of %d bytes (two copies)", size)); err != nil {
		return nil, err
	}
	timeout := n.cfg.ApplyTimeout + time.Duration(size/(10<<20))*time.Second
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: info.Index, Term: info.Term, Size: size}
	n.log.Warn("restoring the replicated state from a backup", "backup_index", info.Index, "bytes", info.Size, "created", info.Created)
	if err := n.userRestore(meta, prepared, timeout); err != nil {
		return nil, mapRaftError(err)
	}
	n.log.Info("state restored from backup", "backup_index", info.Index)
	// The backup carried no member records: write this leader's now, so
	// followers can forward to it; followers write theirs on their next
	// member check.
	n.ensureOwnRecord(ctx, n.log)
	return info, nil
}

// userRestore installs a prepared snapshot through Raft (Raft.Restore),
// unless the node is shutting down. Shutdown waits for it before it stops
// Raft (waitRestores): hashicorp/raft panics ("failed to restore
// snapshot") when it is shut down while its state machine takes a backup,
// and cannot stop while it copies one anyway.
func (n *Node) userRestore(meta *raft.SnapshotMeta, r io.Reader, timeout time.Duration) error {
	n.restoreMu.Lock()
	if n.closing.Load() {
		n.restoreMu.Unlock()
		return ErrShutdown
	}
	n.restores.Add(1)
	n.restoreMu.Unlock()
	defer n.restores.Done()
	return n.raft.Restore(meta, r, timeout)
}

// waitRestores waits until no backup restore is in Raft; the caller has
// set closing, so none starts after it. A restore cannot be cut short, so
// the wait outlasts ctx if it must; it is logged.
func (n *Node) waitRestores(ctx context.Context) {
	// Under restoreMu every restore that saw closing unset is counted;
	// any later one sees it set.
	done := make(chan struct{})
	n.restoreMu.Lock()
	go func() { n.restores.Wait(); close(done) }()
	n.restoreMu.Unlock()
	select {
	case <-done:
		return
	default:
	}
	n.waitingRestore.Store(true)
	defer n.waitingRestore.Store(false)
	n.log.Warn("waiting for the backup restore in progress to finish before Raft stops")
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	start := time.Now()
	n.log.Warn("the backup restore is still running past the shutdown's deadline; waiting for it: Raft cannot stop during it")
	<-done
	n.log.Info("backup restore finished; shutting Raft down", "waited_past_deadline", time.Since(start))
}
