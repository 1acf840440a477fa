//go:build !linux

package mssut

import (
	"io/fs"
	"syscall"
)

// childAttr sets nothing outside Linux: the members outlive an interrupted
// benchmark there and must be stopped by hand.
func childAttr() *syscall.SysProcAttr { return nil }

// allocated is the file's size outside Linux.
func allocated(info fs.FileInfo) int64 { return info.Size() }
