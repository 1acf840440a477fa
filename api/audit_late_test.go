package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/api"
)

// TestLateTasksBoundaries: the rule's edges as documented on LateTasks:
// the lower median of an even count, and exactly 1ms over the median is
// enough. Found by a mutation audit: the upper median, and "more than
// 1ms", survived every API test.
func TestLateTasksBoundaries(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		delays map[string]time.Duration
		want   string
	}{
		// Lower median 20ms: 50 and 60 are over twice it (the upper, 50ms,
		// would make none late).
		{"even count, lower median", map[string]time.Duration{"a": 10 * ms, "b": 20 * ms, "c": 50 * ms, "d": 60 * ms}, "c,d"},
		{"exactly 1ms over the median", map[string]time.Duration{"a": 0, "b": 0, "c": ms}, "c"},
		{"just under 1ms over the median", map[string]time.Duration{"a": 0, "b": 0, "c": ms - 1}, ""},
	} {
		got := api.LateTasks(acksWith(tc.delays))
		if s := strings.Join(sorted(got), ","); s != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, s, tc.want)
		}
	}
}
