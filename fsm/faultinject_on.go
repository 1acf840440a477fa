//go:build faultinject

package fsm

import (
	"os"
	"strings"

	"github.com/metastore/metastore/internal/faultpoint"
)

// unsafeKeepUnsynced is a positive control of the consistency suite: with
// METASTORE_UNSAFE_KEEP_UNSYNCED_STATE=1 the state machine file is trusted
// after a crash of the machine (checkMarker), although its unsynced
// writes may be lost or torn. The suite's power-loss faults must then
// make a member fail.
var unsafeKeepUnsynced = os.Getenv("METASTORE_UNSAFE_KEEP_UNSYNCED_STATE") == "1"

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
