// Package clock is a member's wall clock: the time it stamps into the
// commands it proposes (upload leases, ack deadlines, GC grace and
// deletion times, token expiry) and compares them with. Production builds
// read time.Now. Builds with the faultinject tag add a skew that the
// consistency suite sets at run time (clock_on.go), so that it can run a
// cluster whose members' clocks disagree.
package clock

import "time"

// Now is the member's wall clock.
func Now() time.Time { return time.Now().Add(skew()) }

// EnvSkewFile names a file holding the skew a faultinject build adds to
// the clock, as a Go duration ("-90s"; missing: none). The file is read
// every 20 milliseconds, so a change applies within that time. Other
// builds ignore it.
const EnvSkewFile = "METASTORE_FAULT_CLOCK_SKEW_FILE"
