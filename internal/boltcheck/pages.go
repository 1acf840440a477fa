package boltcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// checkPages checks the page structure of a bbolt file before bbolt opens
// it for writing. bbolt trusts its pages: opening a file for writing walks
// every reachable page to rebuild the free list, and on a page out of
// order, out of range or reached twice it panics in a goroutine of its
// own, which stops the process. The file is checked here first, by plain
// reads with bounds checks: the rules bbolt's walk enforces, and the one
// its writes rely on (a branch element's key is its child's first key), as
// errors.
//
// The layout (bbolt 1.4, internal/common): a 16-byte page header (id u64,
// flags u16, count u16, overflow u32), then count elements of 16 bytes,
// branch (pos u32, ksize u32, pgid u64) or leaf (flags u32, pos u32, ksize
// u32, vsize u32), pos counted from the element. A leaf element with flag 1
// is a bucket: its value starts with the bucket's root page (u64; 0 for an
// inline bucket, whose page follows in the value) and sequence (u64).
// Integers are in the machine's byte order, as bbolt writes them.
func checkPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	c := &pageChecker{r: f, size: info.Size(), seen: map[uint64]bool{}}
	m, err := c.meta()
	if err != nil {
		return err
	}
	c.pageSize, c.high = int64(m.pageSize), m.high
	if c.high*uint64(c.pageSize) > uint64(c.size) {
		return fmt.Errorf("truncated: %d bytes of %d", c.size, c.high*uint64(c.pageSize))
	}
	c.seen[0], c.seen[1] = true, true
	if err := c.tree(m.root, nil, nil, 0); err != nil {
		return err
	}
	if m.freelist != noFreelist {
		return c.freelist(m.freelist)
	}
	return nil
}

const (
	pageHeader   = 16
	elemSize     = 16
	branchFlag   = 0x01
	leafFlag     = 0x02
	metaFlag     = 0x04
	freelistFlag = 0x10
	bucketLeaf   = 0x01
	boltMagic    = 0xED0CDAED
	noFreelist   = ^uint64(0)
	maxDepth     = 64
)

var native = binary.NativeEndian

type pageChecker struct {
	r        io.ReaderAt
	size     int64
	pageSize int64
	high     uint64 // pages in the file, by the meta page
	seen     map[uint64]bool
}

type metaPage struct {
	pageSize uint32
	root     uint64
	freelist uint64
	high     uint64
	txid     uint64
}

// meta reads both meta pages and returns the valid one with the higher
// transaction id, as bbolt does.
func (c *pageChecker) meta() (metaPage, error) {
	var best metaPage
	found := false
	for _, off := range []int64{0, -1} {
		buf := make([]byte, pageHeader+64)
		if off < 0 {
			// The second meta page is at the page size the first one
			// declares; try the usual sizes when the first is damaged.
			off = int64(best.pageSize)
			if !found {
				off = 4096
			}
		}
		if _, err := c.r.ReadAt(buf, off); err != nil {
			continue
		}
		b := buf[pageHeader:]
		m := metaPage{
			pageSize: native.Uint32(b[8:]),
			root:     native.Uint64(b[16:]),
			freelist: native.Uint64(b[32:]),
			high:     native.Uint64(b[40:]),
			txid:     native.Uint64(b[48:]),
		}
		h := fnv.New64a()
		h.Write(b[:56])
		if native.Uint16(buf[8:])&metaFlag == 0 || native.Uint32(b[0:]) != boltMagic || h.Sum64() != native.Uint64(b[56:]) {
			continue
		}
		if m.pageSize < 512 || m.pageSize > 1<<20 || m.pageSize&(m.pageSize-1) != 0 {
			continue
		}
		if !found || m.txid > best.txid {
			best, found = m, true
		}
	}
	if !found {
		return metaPage{}, errors.New("no valid meta page")
	}
	return best, nil
}

// page reads page id with its overflow pages, and marks them reached.
func (c *pageChecker) page(id uint64) ([]byte, error) {
	if id < 2 || id >= c.high {
		return nil, fmt.Errorf("page %d: out of range (2..%d)", id, c.high-1)
	}
	hdr := make([]byte, pageHeader)
	if _, err := c.r.ReadAt(hdr, int64(id)*c.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := native.Uint64(hdr); got != id {
		return nil, fmt.Errorf("page %d: identifies as page %d", id, got)
	}
	overflow := uint64(native.Uint32(hdr[12:]))
	if overflow >= c.high-id {
		return nil, fmt.Errorf("page %d: %d overflow pages run past the end", id, overflow)
	}
	for p := id; p <= id+overflow; p++ {
		if c.seen[p] {
			return nil, fmt.Errorf("page %d: reached twice", p)
		}
		c.seen[p] = true
	}
	buf := make([]byte, int64(overflow+1)*c.pageSize)
	if _, err := c.r.ReadAt(buf, int64(id)*c.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	return buf, nil
}

// tree checks the B+tree rooted at page id: keys in strictly increasing
// order, below max (nil: unbounded), the first one equal to first (the key
// of the branch element pointing to the page; nil at a root), every
// bucket value's tree too. bbolt keeps a branch element's key equal to its
// child's first key, and its writes rely on it: a file where they differ
// passes bbolt's own check, but a write there leaves a freed page in the
// tree.
func (c *pageChecker) tree(id uint64, first, max []byte, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("page %d: tree deeper than %d", id, maxDepth)
	}
	buf, err := c.page(id)
	if err != nil {
		return err
	}
	return c.node(buf, fmt.Sprintf("page %d", id), first, max, depth)
}

// node checks one page (from a file page or an inline bucket's value).
func (c *pageChecker) node(buf []byte, name string, first, max []byte, depth int) error {
	if len(buf) < pageHeader {
		return fmt.Errorf("%s: shorter than a page header", name)
	}
	flags, count := native.Uint16(buf[8:]), int(native.Uint16(buf[10:]))
	if pageHeader+count*elemSize > len(buf) {
		return fmt.Errorf("%s: %d elements do not fit", name, count)
	}
	slice := func(i int, pos uint32, n uint64) ([]byte, error) {
		start := uint64(pageHeader+i*elemSize) + uint64(pos)
		if start+n > uint64(len(buf)) {
			return nil, fmt.Errorf("%s: element %d points past the page", name, i)
		}
		return buf[start : start+uint64(n)], nil
	}
	if first != nil && count == 0 {
		return fmt.Errorf("%s: empty page in a branch", name)
	}
	var prev []byte
	inRange := func(i int, k []byte) error {
		if len(k) == 0 {
			// bbolt writes no empty key (Put and CreateBucket refuse
			// one) and asserts when a write meets one.
			return fmt.Errorf("%s: key %d is empty", name, i)
		}
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			return fmt.Errorf("%s: key %d is not above the one before", name, i)
		}
		if i == 0 && first != nil && !bytes.Equal(k, first) {
			return fmt.Errorf("%s: first key differs from its branch element's key", name)
		}
		if max != nil && bytes.Compare(k, max) >= 0 {
			return fmt.Errorf("%s: key %d is outside its parent's range", name, i)
		}
		prev = k
		return nil
	}
	switch {
	case flags&branchFlag != 0:
		if count == 0 {
			return fmt.Errorf("%s: branch page without elements", name)
		}
		keys := make([][]byte, count)
		for i := range count {
			e := buf[pageHeader+i*elemSize:]
			k, err := slice(i, native.Uint32(e), uint64(native.Uint32(e[4:])))
			if err != nil {
				return err
			}
			if err := inRange(i, k); err != nil {
				return err
			}
			keys[i] = k
		}
		for i := range count {
			e := buf[pageHeader+i*elemSize:]
			hi := max
			if i+1 < count {
				hi = keys[i+1]
			}
			if err := c.tree(native.Uint64(e[8:]), keys[i], hi, depth+1); err != nil {
				return err
			}
		}
		return nil
	case flags&leafFlag != 0:
		for i := range count {
			e := buf[pageHeader+i*elemSize:]
			kv, err := slice(i, native.Uint32(e[4:]), uint64(native.Uint32(e[8:]))+uint64(native.Uint32(e[12:])))
			if err != nil {
				return err
			}
			k, v := kv[:native.Uint32(e[8:])], kv[native.Uint32(e[8:]):]
			if err := inRange(i, k); err != nil {
				return err
			}
			if native.Uint32(e)&bucketLeaf == 0 {
				continue
			}
			if len(v) < 16 {
				return fmt.Errorf("%s: bucket %q has a short header", name, k)
			}
			if root := native.Uint64(v); root != 0 {
				if err := c.tree(root, nil, nil, depth+1); err != nil {
					return fmt.Errorf("bucket %q: %w", k, err)
				}
				continue
			}
			inline := v[16:]
			if len(inline) < pageHeader || native.Uint16(inline[8:])&leafFlag == 0 {
				return fmt.Errorf("inline bucket %q: not a leaf page", k)
			}
			if err := c.node(inline, fmt.Sprintf("inline bucket %q", k), nil, nil, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s: neither a branch nor a leaf (flags %#x)", name, flags)
}

// freelist checks a stored free list: a free-list page listing pages in
// range that no tree reaches.
func (c *pageChecker) freelist(id uint64) error {
	buf, err := c.page(id)
	if err != nil {
		return fmt.Errorf("free list: %w", err)
	}
	if native.Uint16(buf[8:])&freelistFlag == 0 {
		return fmt.Errorf("free list: page %d is not a free-list page", id)
	}
	count, ids := uint64(native.Uint16(buf[10:])), buf[pageHeader:]
	if count == 0xFFFF {
		if len(ids) < 8 {
			return errors.New("free list: short page")
		}
		count, ids = native.Uint64(ids), ids[8:]
	}
	if count > uint64(len(ids)/8) {
		return fmt.Errorf("free list: %d ids do not fit", count)
	}
	for i := range count {
		p := native.Uint64(ids[i*8:])
		if p < 2 || p >= c.high {
			return fmt.Errorf("free list: page %d out of range", p)
		}
		if c.seen[p] {
			return fmt.Errorf("free list: page %d is in use", p)
		}
	}
	return nil
}
