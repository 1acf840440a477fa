package blobstore

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// NewKeyNameLen is the length of the last segment of NewKey's keys.
const NewKeyNameLen = 40

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
