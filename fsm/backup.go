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
	db, err := openDB(path)
	if err != nil {
		return 0, fmt.Errorf("fsm: backup: snapshot content: %w", err)
	}
	applied := readApplied(db)
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
