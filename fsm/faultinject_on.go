//go:build faultinject

package fsm

import (
	"os"
	"strings"

	"github.com/metastore/metastore/jepsen/faultpoint"
)

// faultInject enables the fault points of this package (see
// faultinject_off.go for the production build).
const faultInject = true

func init() {
	faultpoint.EnableFromEnv()
	if path := os.Getenv(EnvFaultBootIDFile); path != "" {
		machine := bootID
		bootID = func() string {
			if b, err := os.ReadFile(path); err == nil {
				return strings.TrimSpace(string(b))
			}
			return machine()
		}
	}
}

// Names of the restore fault points.
const (
	faultRestoreWritten = faultpoint.RestoreWritten
	faultRestoreRenamed = faultpoint.RestoreRenamed
)

// faultRestore passes the restore fault point name  with the restored file's path as detail.
func faultRestore(name, path string) { faultpoint.Hit(name, path) }
