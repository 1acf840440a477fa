package lossyfs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func mountT(t *testing.T) (*FS, string) {
	t.Helper()
	if err := Supported(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "disk"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unmount() })
	return l, mnt
}

// A crash forgets what was written after the last fsync, overwrites and
// appends alike, and keeps what was synced.
func TestCrashLosesUnsyncedWrites(t *testing.T) {
	l, mnt := mountT(t)
	path := filepath.Join(mnt, "f")
	synced := bytes.Repeat([]byte("s"), 3*pageSize+100)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(synced); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("unsynced overwrite"), pageSize+10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("a"), 2*pageSize), int64(len(synced))); err != nil {
		t.Fatal(err)
	}
	// The writer reads what it wrote.
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Contains(got, []byte("unsynced overwrite")) || len(got) != len(synced)+2*pageSize {
		t.Fatalf("read through the mount: %d bytes, %v", len(got), err)
	}
	f.Close()
	if pages, files := l.Unsynced(); pages == 0 || files != 1 {
		t.Fatalf("unsynced: %d pages in %d files", pages, files)
	}
	if _, err := l.Crash(Lose); err != nil {
		t.Fatal(err)
	}
	got, err = os.ReadFile(path)
	if err != nil || !bytes.Equal(got, synced) {
		t.Fatalf("after the crash: %d bytes (want the %d synced), %v", len(got), len(synced), err)
	}
	// A file never synced comes back empty.
	if err := os.WriteFile(filepath.Join(mnt, "g"), []byte("never synced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Crash(Lose); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "g")); err != nil || len(got) != 0 {
		t.Fatalf("a never-synced file holds %q after the crash (%v)", got, err)
	}
}

// A file opened for writing only and truncated at open (os.WriteFile)
// comes back with its synced content.
func TestCrashUndoesTruncateOfWriteOnlyFile(t *testing.T) {
	l, mnt := mountT(t)
	path := filepath.Join(mnt, "w")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("synced content")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(path, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Crash(Lose); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "synced content" {
		t.Fatalf("after the crash: %q %v", got, err)
	}
}

// A file replaced by the rename of a synced one (write, fsync, rename:
// how a marker or a snapshot is written) holds the new content after a
// crash: the undo of the replaced file must not reach the new one.
func TestCrashAfterRenameOverAFileWithUnsyncedWrites(t *testing.T) {
	l, mnt := mountT(t)
	path := filepath.Join(mnt, "marker")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("old, synced")); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	if _, err := f.WriteAt([]byte("OLD, UNSYNCED AND LONGER"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tmp := path + ".tmp"
	g, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Crash(Lose); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "new" {
		t.Fatalf("after the crash: %q %v", got, err)
	}
}

// bbolt without fsync, on the lossy mount, written by another process (a
// process that maps a file of a FUSE file system it serves itself can
// deadlock the Go runtime): after a crash the file is the last synced
// one, so it opens and holds what was committed before the sync and
// nothing after.
func TestCrashBoltNoSync(t *testing.T) {
	l, mnt := mountT(t)
	path := filepath.Join(mnt, "state.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestBoltWriter$")
	cmd.Env = append(os.Environ(), "LOSSYFS_BOLT_WRITER="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writer: %v\n%s", err, out)
	}
	undone, err := l.Crash(Lose)
	if err != nil || undone == 0 {
		t.Fatalf("crash undid %d pages: %v", undone, err)
	}
	// Read the disk itself, not through the mount.
	db, err := bolt.Open(filepath.Join(l.backing, "state.db"), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the synced file does not open after the crash: %v", err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		if b == nil || b.Get([]byte("synced")) == nil {
			t.Error("lost the synced write")
		}
		for _, k := range []string{"lost-1", "lost-2", "lost-3"} {
			if b != nil && b.Get([]byte(k)) != nil {
				t.Errorf("%s survived the crash without a sync", k)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestBoltWriter is the writer process of TestCrashBoltNoSync: it commits
// "synced", syncs, commits three more and exits without closing.
func TestBoltWriter(t *testing.T) {
	path := os.Getenv("LOSSYFS_BOLT_WRITER")
	if path == "" {
		t.Skip("the writer process of TestCrashBoltNoSync")
	}
	// NoGrowSync too: bbolt otherwise syncs the file when a commit grows
	// it, which makes the commits before durable.
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoGrowSync: true})
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string) {
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte(k), bytes.Repeat([]byte(k), 3000))
		}); err != nil {
			t.Fatal(err)
		}
	}
	put("synced")
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"lost-1", "lost-2", "lost-3"} {
		put(k)
	}
	os.Exit(0)
}
