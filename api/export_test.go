package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/config"
)

// Test-only access to the route table and to URL signing, for the
// black-box tests in api_test.

// RouteInfo is one route of the table with its permission.
type RouteInfo struct{ Name, Method, Path, Perm string }

// Routes lists the route table.
func Routes() []RouteInfo {
	s := New(Deps{Config: config.DefaultConfig(), Registry: prometheus.NewRegistry()})
	var out []RouteInfo
	for _, rt := range s.routeTable() {
		out = append(out, RouteInfo{rt.name, rt.method, rt.path, rt.perm.String()})
	}
	return out
}

// ObjectSignature is the signature of a signed object URL.
func ObjectSignature(key []byte, method, objKey string, expires int64) string {
	return objectSignature(key, method, objKey, expires)
}
