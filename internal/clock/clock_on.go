//go:build faultinject

package clock

import (
	"os"
	"strings"
	"sync/atomic"
	"time"
)

const pollEvery = 20 * time.Millisecond

var current atomic.Int64

func skew() time.Duration { return time.Duration(current.Load()) }

func init() {
	if path := os.Getenv(EnvSkewFile); path != "" {
		load(path)
		go func() {
			for range time.Tick(pollEvery) {
				load(path)
			}
		}()
	}
}

// load sets the skew from the file at path.
func load(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		current.Store(0)
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return // a file being written: keep the last value
	}
	current.Store(int64(d))
}
