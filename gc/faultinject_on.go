//go:build faultinject

package gc

import (
	"strings"

	"github.com/metastore/metastore/internal/faultpoint"
)

// faultInject enables the fault points of this package (see
// faultinject_off.go for the production build).
const faultInject = true

func init() { faultpoint.EnableFromEnv() }

// faultAfterMark is the point faultpoint.GCAfterMark: the keys are marked
// deleting in the replicated state and not yet deleted from the store.
func faultAfterMark(keys []string) {
	faultpoint.Hit(faultpoint.GCAfterMark, strings.Join(keys, " "))
}
