//go:build !faultinject

package api

// unsafeStaleReads is false in production builds, so the compiler removes
// the positive control it guards (see unsafe_on.go).
const unsafeStaleReads = false
