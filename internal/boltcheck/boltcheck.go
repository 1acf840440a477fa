// Package boltcheck checks that a bbolt file is whole and readable before a
// process opens it for writing. Every bbolt file of a member goes through
// it: the Raft log (node), the state machine's file at open, and every
// snapshot or backup before it is restored (fsm).
//
// bbolt trusts its file: it maps it and follows page ids without bounds
// checks. A truncated file makes it fault (SIGBUS) on the missing pages, a
// page overwritten with garbage makes it panic, in a goroutine of its own
// when the freelist is rebuilt at open (NoFreelistSync), and the process
// dies with a stack trace instead of an error naming the file. Check opens
// the file read-only (which builds no free list), compares its length with
// the length its meta page records, checks the page structure by plain
// reads (checkPages), and reads every bucket, key and value, turning a
// fault or a panic into an error.
package boltcheck

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrCorrupt is wrapped by every problem Check finds in a file.
var ErrCorrupt = errors.New("corrupt")

// Error is a problem found in a file.
type Error struct {
	Path    string
	Problem string
}

func (e *Error) Error() string { return fmt.Sprintf("%s is corrupt: %s", e.Path, e.Problem) }

func (e *Error) Unwrap() error { return ErrCorrupt }

// BucketFunc may check the content of a top-level bucket further; it runs
// inside the read transaction.
type BucketFunc func(name []byte, b *bolt.Bucket) error

// Check checks the bbolt file at path. A file that does not exist, or that
// another process holds locked, is not checked (nil): opening it reports
// those. verify, if not nil, is called for every top-level bucket.
func Check(path string, verify BucketFunc) (err error) {
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Size() == 0 {
		return &Error{path, "the file is empty"}
	}
	// A fault on a mapped page (a file shorter than its pages say) becomes
	// a panic in this goroutine, recovered below.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &Error{path, fmt.Sprintf("unreadable: %v", r)}
		}
	}()
	// The read-only open takes the file's shared lock, so no writer
	// changes it while its pages are read.
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil
	}
	if err != nil {
		return &Error{path, fmt.Sprintf("cannot be opened: %v", err)}
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		if tx.Size() > info.Size() {
			return &Error{path, fmt.Sprintf("truncated: %d bytes, its meta page says %d", info.Size(), tx.Size())}
		}
		if err := checkPages(path); err != nil {
			return &Error{path, err.Error()}
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if err := readAll(b); err != nil {
				return &Error{path, fmt.Sprintf("bucket %q: %v", name, err)}
			}
			if verify != nil {
				if err := verify(name, b); err != nil {
					return &Error{path, fmt.Sprintf("bucket %q: %v", name, err)}
				}
			}
			return nil
		})
	})
}

// readAll reads every key and value of b and of its nested buckets.
func readAll(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v != nil {
			if len(v) > 0 {
				_ = v[len(v)-1] // touch the value's last page
			}
			return nil
		}
		nested := b.Bucket(k)
		if nested == nil {
			return fmt.Errorf("key %x has no value and is no bucket", k)
		}
		return readAll(nested)
	})
}

// NotInUse fails if a process holds the bbolt file at path open (bbolt
// takes a flock on it); a file that does not exist is not in use. It does
// not wait: a running member holds its files for as long as it runs.
func NotInUse(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("%s is in use by another process (is a member running on this data directory? stop it first): %w", path, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
