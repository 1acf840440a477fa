package blobstore

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

// NewKey returns a new object key under dir (no trailing "/"): 16 hex
// digits of now in nanoseconds since 1970, then 12 random bytes in hex.
//
// The random part makes keys unique and impossible to guess. The time in
// front makes the keys one directory hands out grow with time, so the
// state machine's blob records of a task are inserted at the end of its
// key range instead of at random places: a commit then rewrites the few
// B+tree pages at the ends of the active tasks' ranges, not one page per
// new blob (BenchmarkAckState in fsm measures both shapes). Keys from
// leaders whose clocks differ still never collide.
func NewKey(dir string, now time.Time) string {
	var b [20]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixNano()))
	if _, err := rand.Read(b[8:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return dir + "/" + hex.EncodeToString(b[:])
}

// NewBatchID returns the id of a batch of upload keys (the state machine
// derives the batch's keys from it, fsm.UploadKey): 16 hex digits of now
// in nanoseconds since 1970, then 8 random bytes in hex. A key of the
// batch is the id and 8 hex digits of its index, the shape of NewKey's
// name, so TimeWindow reads both alike.
func NewBatchID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixNano()))
	if _, err := rand.Read(b[8:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// windowDigits is how many of the 16 hex digits of NewKey's time the keys
// of one time window share: 8, a window of 2^32 ns (4.3 s).
const windowDigits = 8

// TimeWindow returns the prefix that the keys NewKey made under the same
// directory within one time window of 4.3 s share (the directory, "/" and
// the first digits of the time), and false for a key NewKey did not make.
// The objects under such a prefix are one directory's uploads of those
// seconds, which one listing reads (NameLister). A signed upload slot's
// name (56 hex digits, its lease's time first; fsm/upload_slots.go) has a
// window too.
func TimeWindow(key string) (string, bool) {
	i := strings.LastIndexByte(key, '/')
	name := key[i+1:]
	if i < 0 || (len(name) != 2*20 && len(name) != 56) {
		return "", false
	}
	if _, err := hex.DecodeString(name); err != nil || strings.ToLower(name) != name {
		return "", false
	}
	return key[:i+1+windowDigits], true
}
