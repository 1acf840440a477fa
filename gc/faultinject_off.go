//go:build !faultinject

package gc

// faultInject is false in production builds, so the compiler removes every
// call it guards and the binary holds no fault-injection code. The
// faultinject build (faultinject_on.go) sets it and routes the hooks to
// internal/faultpoint.
const faultInject = false

// faultAfterMark runs between the Raft commit of a deleting mark and the
// object-store delete of the marked keys.
func faultAfterMark([]string) {}
