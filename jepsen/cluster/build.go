package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Packages the suite builds.
const (
	MetastorePackage = "./cmd/metastore"
	S3ServerPackage  = "./cmd/s3server"
)

// FaultInjectTag is the build tag that compiles the fault points in.
const FaultInjectTag = "faultinject"

// GoTool returns the go command: the one on PATH, else the toolchain's own.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ModuleRoot returns the directory of the metastore module containing the
// working directory (where go test runs a package).
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, GoTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("cluster: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("cluster: not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// Build compiles pkg (relative to the module root, like "./cmd/metastore")
// into out with the given tags, with the race detector if race is set.
func Build(ctx context.Context, pkg, out string, tags []string, race bool) error {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	args := []string{"build", "-buildvcs=false", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	if race {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, GoTool(), args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster: go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return nil
}
