package fsm

import (
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// dropResident takes the pages of db's mapping of its file out of this
// process's resident set (madvise MADV_DONTNEED), after a scan that read
// the whole blobs bucket through it (rebuildCounts at open and restore).
// bbolt maps the file shared and read-only and writes through the file,
// so nothing is lost: the pages stay in the page cache, and the next read
// of one maps it again (a minor fault). Without it, every page the scan
// touched counts in the member's VmRSS (RssFile) until the file is mapped
// again, which a file that no longer grows may never be: a member
// restarted with a million blobs showed 650 MiB of them.
//
// It runs inside a read transaction: bbolt maps the file again only once
// no read transaction is open, so the mapping cannot move meanwhile. It is
// advice: a failure changes nothing but the resident set, and is
// returned for the log.
func dropResident(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		start, size := db.Info().Data, uintptr(tx.Size())
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, size, syscall.MADV_DONTNEED); errno != 0 {
			return errno
		}
		return nil
	})
}
