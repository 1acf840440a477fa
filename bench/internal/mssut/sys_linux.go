package mssut

import (
	"io/fs"
	"syscall"
)

// childAttr makes a child process die with this one (SIGKILL when the
// parent exits), so an interrupted benchmark leaves no members behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// allocated is the disk space a file occupies.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
