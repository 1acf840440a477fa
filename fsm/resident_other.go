//go:build !linux

package fsm

import bolt "go.etcd.io/bbolt"

// dropResident is resident_linux.go's, which other systems do without:
// the scanned pages stay in the resident set until the file is mapped
// again.
func dropResident(*bolt.DB) error { return nil }
