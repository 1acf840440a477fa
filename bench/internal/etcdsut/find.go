package etcdsut

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/metastore/metastore/bench/internal/procs"
)

// DebianPackage is the Debian package that ships the etcd server.
const DebianPackage = "etcd-server"

// DefaultBinary is where DebianPackage installs the server.
const DefaultBinary = "/usr/bin/etcd"

// Find returns the path of the etcd server binary: DefaultBinary, or etcd
// on PATH. When there is none, the error is a *procs.NotInstalledError
// naming DebianPackage.
func Find() (string, error) {
	if fi, err := os.Stat(DefaultBinary); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return DefaultBinary, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("etcdsut: %w", &procs.NotInstalledError{What: "etcd server binary (" + DefaultBinary + ")", Package: DebianPackage})
}

// Install installs DebianPackage with apt-get (as root) and stops the etcd
// service or process the installation may have started.
func Install(ctx context.Context) error {
	return procs.Install(ctx, procs.Package{
		Name:     DebianPackage,
		Service:  "etcd.service",
		IsServer: func(cmd []string) bool { return filepath.Base(cmd[0]) == "etcd" },
	})
}
