package clock

import (
	"testing"
	"time"
)

func TestNowFollowsTheWallClock(t *testing.T) {
	before := time.Now()
	now := Now()
	after := time.Now()
	if skew() == 0 && (now.Before(before) || now.After(after)) {
		t.Fatalf("Now %s outside [%s, %s]", now, before, after)
	}
}
