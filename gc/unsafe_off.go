//go:build !faultinject

package gc

// unsafeSkipMark is false in production builds, so the compiler removes
// the positive control it guards (see unsafe_on.go).
const unsafeSkipMark = false

func (cy *cycle) unsafeDeleteBeforeMark(keys []string) ([]string, error) { return keys, nil }
