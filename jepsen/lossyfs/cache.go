package lossyfs

import "fmt"

// The kernel's page cache of a lossy file (Finding 4, docs/consistency.md).
//
// The file system is mounted with ExplicitDataCacheControl: the kernel
// never drops cached pages of a file on its own because a getattr found
// another mtime or size (FUSE's auto_inval_data, the default). With it,
// every stat of a file being written (bbolt's own fstat when it grows the
// file, a stat by path) could drop pages of the mapping bbolt reads
// while a write of them was still on its way to the backing file: lossyfs
// serves requests concurrently, and its Write first reads the pages'
// pre-images, so a READ of a dropped page (a fault of bbolt's mapping,
// readahead) could reach the backing file before the WRITE did and cache
// the page's old content, zeros for a page past the old end, for good. A
// bbolt reader then saw "Page expected to be N, but self identifies as 0"
// and a writer built on the stale page ("circular dependency", "page
// already freed"), with no crash involved: jepsen/lossyfs's
// TestFSMPowerLossStress (variant lossy-killonly, readers on) corrupted the
// state machine file of a member that was only ever SIGKILLed, and never on
// a plain directory.
//
// So nothing invalidates the cache while a file is in use, and Crash, which
// changes the backing files behind the kernel's back, must drop it
// itself: it remounts.

// dropCache drops every page the kernel caches for the file system by
// unmounting and mounting it again (Crash: no process may hold a file open).
func (l *FS) dropCache() error {
	l.mu.Lock()
	mounted := l.server != nil
	l.mu.Unlock()
	if !mounted {
		return nil
	}
	if err := l.Unmount(); err != nil {
		return fmt.Errorf("lossyfs: crash: remount: %w", err)
	}
	if err := l.mount(); err != nil {
		return fmt.Errorf("lossyfs: crash: remount: %w", err)
	}
	return nil
}
