//go:build !faultinject

package fsm

// faultInject is false in production builds, so the compiler removes every
// call it guards and the binary holds no fault-injection code. The
// faultinject build (faultinject_on.go) sets it and routes the hooks to
// internal/faultpoint.
const faultInject = false

// unsafeKeepUnsynced is a positive control of the faultinject build
// (faultinject_on.go); production builds never trust a state machine file
// after a crash of the machine.
const unsafeKeepUnsynced = false

// Names of the restore fault points (internal/faultpoint declares the same
// names for the faultinject build).
const (
	faultRestoreWritten = "fsm.restore-written"
	faultRestoreRenamed = "fsm.restore-renamed"
)

// faultRestore runs at the restore fault points of RestoreFrom.
func faultRestore(name, path string) {}
