// Package lossyfs is a FUSE file system over a directory that can forget,
// on demand, every write not yet made durable by fsync: what a crash of the
// machine (power loss, kernel panic) does to data still in the page cache.
// The consistency suite puts each member's data directory on one
// (cluster.Options.LossyDisk) to test the state machine file, which is
// written without fsync on purpose (fsm/durability.go).
//
// Writes go through to the backing directory at once, so the running
// process reads what it wrote. For every file, the first write to each
// 4 KiB page after the file's last fsync (or after it was first opened)
// keeps the page's content from before (its pre-image), and the size the
// file had is remembered. Fsync and fdatasync of the file drop both. Crash
// then, with the writer dead, writes every pre-image back and truncates each
// file to its synced size (Lose), or does so for a random half of the pages
// only (Tear: a torn write, some unsynced pages reached the disk and others
// did not), and remounts, so no page of the kernel's cache survives.
//
// Limits, written down because they bound what a run proves:
//
//   - Only file contents are lossy. Directory operations (create, rename,
//     unlink) are durable at once, as if every one were followed by an
//     fsync of its directory; the store syncs its directory after each
//     rename that matters, so this hides nothing it relies on, but it
//     would hide a missing directory fsync.
//   - Pages are 4 KiB and a page's pre-image is taken at its first write;
//     the real page cache may write pages back at any time before the
//     crash, which Tear models only as "some pages reached the disk".
//   - Writes through a shared writable mapping are not seen (bbolt maps
//     its file read-only and writes with pwrite).
//   - O_SYNC and O_DSYNC writes are treated like any other until an fsync.
//   - The kernel's cache of file contents is never invalidated while the
//     file system is mounted (ExplicitDataCacheControl, see cache.go): a
//     file changed in the backing directory by anything but this mount
//     is read stale until Crash, which remounts (and so takes 2 s more
//     when another mount namespace keeps the connection, see Unmount).
//
// A mount can also fail writes and fsyncs with EIO or ENOSPC, or stall
// fsyncs, at run time (SetFault: faults.go).
package lossyfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

const pageSize = 4096

// Mode is what Crash forgets.
type Mode int

const (
	// Lose forgets every write not synced.
	Lose Mode = iota
	// Tear forgets a random half of the pages written and not synced.
	Tear
)

// FS is a mounted lossy file system.
type FS struct {
	backing, mountpoint string

	mu     sync.Mutex
	server *fuse.Server
	files  map[fileID]*fileState

	fault atomic.Pointer[activeFault] // SetFault (faults.go)
}

type fileID struct{ dev, ino uint64 }

// fileState is what a crash would undo in one file.
type fileState struct {
	// rw is a descriptor of the file itself (not of a path, which a
	// rename may have given to another file since), for Crash.
	rw         *os.File
	syncedSize int64
	pre        map[int64][]byte // page index -> content before the first unsynced write
	// failed are pages of pre whose fsync failed: they stay lossy
	// through later fsyncs until written again (fsyncFailed).
	failed map[int64]bool
}

// Supported reports why a lossy file system cannot be mounted here, or
// nil: it needs /dev/fuse and root.
func Supported() error {
	if os.Geteuid() != 0 {
		return errors.New("lossyfs: mounting a FUSE file system needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("lossyfs: no FUSE device: %w", err)
	}
	return nil
}

// Mount mounts a lossy view of the directory backing at mountpoint (both
// must exist). It needs root or fusermount.
func Mount(backing, mountpoint string) (*FS, error) {
	l := &FS{backing: backing, mountpoint: mountpoint, files: map[fileID]*fileState{}}
	if err := l.mount(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *FS) mount() error {
	root := &fs.LoopbackRoot{Path: l.backing}
	root.NewNode = func(rd *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: rd}, l: l}
	}
	rootNode := root.NewNode(root, nil, "", nil)
	root.RootNode = rootNode
	zero := time.Duration(0)
	srv, err := fs.Mount(l.mountpoint, rootNode, &fs.Options{
		// No attribute or entry caching: sizes change behind the kernel's
		// back at a crash.
		AttrTimeout:  &zero,
		EntryTimeout: &zero,
		MountOptions: fuse.MountOptions{
			AllowOther:  true,
			FsName:      "lossyfs",
			Name:        "lossyfs",
			DirectMount: true,
			// Finding 4 (cache.go): no invalidation of cached pages
			// when a getattr sees a new mtime or size.
			ExplicitDataCacheControl: true,
		},
	})
	if err != nil {
		return fmt.Errorf("lossyfs: mount %s on %s: %w", l.backing, l.mountpoint, err)
	}
	l.mu.Lock()
	l.server = srv
	l.mu.Unlock()
	return nil
}

// Unmount unmounts the file system (no process may hold a file open). A
// process started in another mount namespace while the file system was
// mounted (ip netns exec makes one) keeps a copy of the mount, and with it
// the FUSE connection; Unmount then aborts the connection
// (/sys/fs/fuse/connections, mounted if need be) rather than wait.
func (l *FS) Unmount() error {
	l.mu.Lock()
	srv := l.server
	l.server = nil
	l.mu.Unlock()
	if srv == nil {
		return nil
	}
	l.ClearFault() // no fsync stays stalled
	l.mu.Lock()
	for _, fs := range l.files {
		fs.rw.Close()
	}
	clear(l.files)
	l.mu.Unlock()
	var st syscall.Stat_t
	statErr := syscall.Stat(l.mountpoint, &st)
	done := make(chan error, 1)
	go func() { done <- srv.Unmount() }()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Second):
	}
	if statErr != nil {
		return fmt.Errorf("lossyfs: unmount %s: the FUSE connection stays open and its device is unknown: %w", l.mountpoint, statErr)
	}
	if err := abort(unix.Minor(st.Dev)); err != nil {
		return fmt.Errorf("lossyfs: unmount %s: %w", l.mountpoint, err)
	}
	return <-done
}

// abort aborts the FUSE connection with device minor number minor.
func abort(minor uint32) error {
	const dir = "/sys/fs/fuse/connections"
	if _, err := os.Stat(fmt.Sprintf("%s/%d", dir, minor)); err != nil {
		if err := syscall.Mount("fusectl", dir, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("mount fusectl on %s: %w", dir, err)
		}
	}
	return os.WriteFile(fmt.Sprintf("%s/%d/abort", dir, minor), []byte("1"), 0o200)
}

// Unsynced reports how many pages and files a crash would undo now.
func (l *FS) Unsynced() (pages, files int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, st := range l.files {
		if len(st.pre) > 0 {
			files++
			pages += len(st.pre)
		}
	}
	return pages, files
}

// Crash undoes the unsynced writes (all of them, or a random half of the
// pages under Tear) in the backing files, then remounts so that no page
// the kernel cached survives (cache.go). Every process that wrote through
// the mount must be dead and no file may be open. It returns the pages
// undone.
func (l *FS) Crash(mode Mode) (int, error) {
	l.mu.Lock()
	files := l.files
	l.files = map[fileID]*fileState{}
	l.mu.Unlock()
	undone := 0
	var errs []error
	for _, st := range files {
		n, err := st.undo(mode)
		undone += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := l.dropCache(); err != nil { // cache.go
		errs = append(errs, err)
	}
	return undone, errors.Join(errs...)
}

func (st *fileState) undo(mode Mode) (int, error) {
	f := st.rw
	defer f.Close()
	undone := 0
	for page, data := range st.pre {
		if mode == Tear && rand.IntN(2) == 0 {
			continue
		}
		if _, err := f.WriteAt(data, page*pageSize); err != nil {
			return undone, err
		}
		undone++
	}
	if mode == Lose {
		if err := f.Truncate(st.syncedSize); err != nil {
			return undone, err
		}
	}
	return undone, f.Sync()
}

// state returns the crash state of the file open as fd, creating it with
// the file's current size as its synced size.
func (l *FS) state(fd int) (*fileState, error) {
	var s syscall.Stat_t
	if err := syscall.Fstat(fd, &s); err != nil {
		return nil, err
	}
	id := fileID{uint64(s.Dev), s.Ino}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok := l.files[id]; ok {
		return st, nil
	}
	rw, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	st := &fileState{rw: rw, syncedSize: s.Size, pre: map[int64][]byte{}}
	l.files[id] = st
	return st, nil
}

// before keeps the pre-images of the pages [off, off+n) not yet kept.
func (l *FS) before(fd int, st *fileState, off, n int64) syscall.Errno {
	l.mu.Lock()
	defer l.mu.Unlock()
	for page := off / pageSize; page*pageSize < off+n; page++ {
		delete(st.failed, page) // written again: a fsync may make it durable
		if _, ok := st.pre[page]; ok || page*pageSize >= st.syncedSize {
			continue // kept already, or beyond the synced size (truncated at a crash)
		}
		buf := make([]byte, pageSize)
		m, err := syscall.Pread(fd, buf, page*pageSize)
		if err != nil {
			return fs.ToErrno(err)
		}
		st.pre[page] = buf[:m]
	}
	return 0
}

func (l *FS) synced(fd int, st *fileState) syscall.Errno {
	var s syscall.Stat_t
	if err := syscall.Fstat(fd, &s); err != nil {
		return fs.ToErrno(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st.syncedSize = s.Size
	for page := range st.pre {
		if !st.failed[page] {
			delete(st.pre, page)
		}
	}
	return 0
}

// node is a loopback node whose files are lossy.
type node struct {
	fs.LoopbackNode
	l *FS
}

func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

// wrap makes fh, a handle of the file ino, lossy.
func (n *node) wrap(fh fs.FileHandle, ino *fs.Inode) (fs.FileHandle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh, 0
	}
	fd, ok := lf.PassthroughFd()
	if !ok {
		return nil, syscall.EBADF
	}
	st, err := n.l.state(fd)
	if err != nil {
		lf.Release(context.Background())
		return nil, fs.ToErrno(err)
	}
	// Pre-images are read through a descriptor of its own: the file may
	// be open for writing only.
	r, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		lf.Release(context.Background())
		return nil, fs.ToErrno(err)
	}
	return &file{LoopbackFile: lf, fd: fd, rfd: int(r.Fd()), r: r, st: st, l: n.l, ino: ino}, 0
}

var _ = (fs.NodeOpener)((*node)(nil))
var _ = (fs.NodeCreater)((*node)(nil))

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		// Keep what the truncation throws away.
		if errno := n.keepAll(); errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	w, errno := n.wrap(fh, n.EmbeddedInode())
	return w, fl, errno
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	w, errno := n.wrap(fh, ch)
	return ch, w, fl, errno
}

// keepAll keeps the pre-image of every page of the file (before it is
// truncated by path or at open).
func (n *node) keepAll() syscall.Errno {
	f, err := os.Open(n.backingPath())
	if err != nil {
		return 0 // nothing to keep: it is being created
	}
	defer f.Close()
	fd := int(f.Fd())
	st, err := n.l.state(fd)
	if err != nil {
		return fs.ToErrno(err)
	}
	return n.l.before(fd, st, 0, st.syncedSize)
}

var _ = (fs.NodeCopyFileRanger)((*node)(nil))

// CopyFileRange is refused, so the kernel copies with reads and writes
// (through Write, which keeps the pre-images).
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

var _ = (fs.NodeSetattrer)((*node)(nil))

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if f, ok := fh.(*file); ok {
		return f.Setattr(ctx, in, out)
	}
	if size, ok := in.GetSize(); ok {
		var s syscall.Stat_t
		if n.l.fault.Load() != nil && syscall.Stat(n.backingPath(), &s) == nil {
			if errno := n.l.inject(ctx, opTruncate, n.Path(n.Root()), -1, s.Size, int64(size)-s.Size); errno != 0 {
				return errno
			}
		}
		if errno := n.keepAll(); errno != 0 {
			return errno
		}
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

var _ = (fs.NodeStatfser)((*node)(nil))

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if errno := n.LoopbackNode.Statfs(ctx, out); errno != 0 {
		return errno
	}
	n.l.statfsFull(out)
	return 0
}

// file is an open lossy file.
type file struct {
	*fs.LoopbackFile
	fd  int      // the handle's descriptor (its access mode)
	rfd int      // a read-only descriptor of the same file, for pre-images
	r   *os.File // holds rfd
	st  *fileState
	l   *FS
	ino *fs.Inode // the file's (for its path: faultPath)
}

func (f *file) Release(ctx context.Context) syscall.Errno {
	f.r.Close()
	return f.LoopbackFile.Release(ctx)
}

// Writev is Write of the concatenation: LoopbackFile's own Writev would
// write past the pre-images.
func (f *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	return f.Write(ctx, bytes.Join(data, nil), off)
}

// PassthroughFd is refused: the kernel would write to the backing file
// directly, past the pre-images.
func (f *file) PassthroughFd() (int, bool) { return 0, false }

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := f.l.inject(ctx, opWrite, f.faultPath(), f.rfd, off, int64(len(data))); errno != 0 {
		f.forget(off, int64(len(data)))
		return 0, errno
	}
	if errno := f.l.before(f.rfd, f.st, off, int64(len(data))); errno != 0 {
		return 0, errno
	}
	n, errno := f.LoopbackFile.Write(ctx, data, off)
	if errno != 0 {
		f.forget(off, int64(len(data)))
	}
	return n, errno
}

func (f *file) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if errno := f.l.inject(ctx, opAllocate, f.faultPath(), f.rfd, int64(off), int64(size)); errno != 0 {
		return errno
	}
	if errno := f.l.before(f.rfd, f.st, int64(off), int64(size)); errno != 0 {
		return errno
	}
	return f.LoopbackFile.Allocate(ctx, off, size, mode)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		var s syscall.Stat_t
		if err := syscall.Fstat(f.fd, &s); err != nil {
			return fs.ToErrno(err)
		}
		if errno := f.l.inject(ctx, opTruncate, f.faultPath(), f.rfd, s.Size, int64(size)-s.Size); errno != 0 {
			return errno
		}
		if int64(size) < s.Size {
			if errno := f.l.before(f.rfd, f.st, int64(size), s.Size-int64(size)); errno != 0 {
				return errno
			}
		}
	}
	return f.LoopbackFile.Setattr(ctx, in, out)
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	errno := f.l.inject(ctx, opFsync, f.faultPath(), f.rfd, 0, 0)
	if errno == 0 {
		errno = f.LoopbackFile.Fsync(ctx, flags)
	}
	switch errno {
	case 0:
		return f.l.synced(f.fd, f.st)
	case syscall.EINTR:
	default:
		f.l.fsyncFailed(f.fd, f.st)
	}
	return errno
}

var (
	_ = (fs.FileWriter)((*file)(nil))
	_ = (fs.FileWritever)((*file)(nil))
	_ = (fs.FileAllocater)((*file)(nil))
	_ = (fs.FileSetattrer)((*file)(nil))
	_ = (fs.FileFsyncer)((*file)(nil))
	_ = (fs.FilePassthroughFder)((*file)(nil))
	_ = (fs.FileReader)((*file)(nil))
	_ = (fs.FileGetlker)((*file)(nil))
	_ = (fs.FileFlusher)((*file)(nil))
	_ = (fs.FileReleaser)((*file)(nil))
)
