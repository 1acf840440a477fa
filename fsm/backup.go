package fsm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// PrepareRestore reads a snapshot of this state machine (as Persist writes
// it) from r, checks it, and writes to w the same state ready to be
// restored into a running cluster by an operator (raft.Restore): its applied
// index is cleared, because the cluster it goes into numbers its log
// afresh, and a stale index would make the state machine skip new entries;
// its member records are cleared, because they describe the cluster the
// backup was taken from (the members of the cluster restored into write
// theirs again).
// It returns the applied index the snapshot was taken at. dir holds the
// temporary file.
func PrepareRestore(r io.Reader, w io.Writer, dir string) (uint64, error) {
	hdr, err := readSnapshotHeader(r)
	if err != nil {
		return 0, fmt.Errorf("fsm: backup: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "restore-*.db")
	if err != nil {
		return 0, fmt.Errorf("fsm: backup: %w", err)
	}
	path := tmp.Name()
	tmp.Close()
	defer os.Remove(path)
	if err := writeSynced(path, r); err != nil {
		return 0, fmt.Errorf("fsm: backup: %w", err)
	}
	if err := checkSnapshotFile(path); err != nil {
		return 0, fmt.Errorf("fsm: backup: snapshot content: %w", err)
	}
	db, err := openDB(path, nil)
	if err != nil {
		return 0, fmt.Errorf("fsm: backup: snapshot content: %w", err)
	}
	applied := readApplied(db)
	// The file is whole; its content must also be a state this build can
	// run on: every member applies the same entries to it, and a state that
	// breaks an invariant would stop them all at the first entry that meets
	// it. The consistency check (fsck) covers the manifest records, the
	// blobs, their reference counts and the GC indexes, and the epochs and
	// attempts the jobs name.
	if err := checkBackupContent(db); err != nil {
		db.Close()
		return 0, fmt.Errorf("fsm: backup: snapshot content: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Delete(metaAppliedIndex); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketMembers); err != nil {
			return err
		}
		_, err := tx.CreateBucket(bucketMembers)
		return err
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("fsm: backup: %w", err)
	}
	if _, err := w.Write(hdr); err != nil {
		return 0, err
	}
	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return 0, err
	}
	return applied, nil
}

// checkBackupContent runs the consistency check on db and answers its
// findings as an error.
func checkBackupContent(db *bolt.DB) error {
	rep := &FsckReport{}
	if err := db.View(func(tx *bolt.Tx) error { return (&txn{tx: tx}).fsck(rep, false) }); err != nil {
		return fmt.Errorf("consistency check: %w", err)
	}
	if rep.OK() {
		return nil
	}
	var first string
	switch {
	case len(rep.Problems) > 0:
		first = rep.Problems[0]
	default:
		m := rep.Mismatches[0]
		first = fmt.Sprintf("blob %q has reference count %d, its records make %d", m.Key, m.Stored, m.Recounted)
	}
	return fmt.Errorf("consistency check failed: %d problems and %d reference count mismatches; first: %s",
		len(rep.Problems), len(rep.Mismatches), first)
}
