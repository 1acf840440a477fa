package blobstore

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestExactReaderWithholdsTooLongBodies: whatever buffer its reader
// offers, an exactReader of size n passes on all n bytes and then io.EOF
// for a body of n bytes; for a longer body it fails with ErrSizeMismatch
// before it has passed on all n (so no transport sends a complete body
// that was too long); for a shorter one it fails after passing what there
// was.
func TestExactReaderWithholdsTooLongBodies(t *testing.T) {
	const size = 5
	for _, body := range []string{"abc", "abcde", "abcdef", "abcdefghijklmnop"} {
		for _, buf := range []int{1, 2, size, 64} {
			for _, oneByte := range []bool{false, true} {
				what := fmt.Sprintf("body %q, size %d, reads of %d bytes (source one byte at a time: %v)", body, size, buf, oneByte)
				var src io.Reader = strings.NewReader(body)
				if oneByte {
					src = iotest.OneByteReader(src)
				}
				r := newExactReader(src, size)
				var passed []byte
				var err error
				for err == nil {
					p := make([]byte, buf)
					var n int
					n, err = r.Read(p)
					if n < 0 || n > len(p) {
						t.Fatalf("%s: Read returned %d", what, n)
					}
					passed = append(passed, p[:n]...)
				}
				switch {
				case len(body) == size:
					if err != io.EOF || string(passed) != body {
						t.Fatalf("%s: passed %q, then %v; want the body, then EOF", what, passed, err)
					}
				case len(body) > size:
					if !errors.Is(err, ErrSizeMismatch) || len(passed) >= size || !strings.HasPrefix(body, string(passed)) {
						t.Fatalf("%s: passed %q, then %v; want fewer than %d bytes, then ErrSizeMismatch", what, passed, err, size)
					}
				default:
					if !errors.Is(err, ErrSizeMismatch) || string(passed) != body {
						t.Fatalf("%s: passed %q, then %v; want the body, then ErrSizeMismatch", what, passed, err)
					}
				}
			}
		}
	}
}
