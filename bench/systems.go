package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"

	"github.com/metastore/metastore/bench/internal/etcdsut"
	"github.com/metastore/metastore/bench/internal/mssut"
	"github.com/metastore/metastore/bench/internal/sut"
	"github.com/metastore/metastore/bench/internal/zksut"
)

// systemNames are the systems the command measures by default, in run
// order.
var systemNames = []string{"metastore", "etcd", "etcd-batched", "etcd-cas", "zookeeper", "zookeeper-cas"}

// extraSystemNames are the systems the command knows beyond those:
// "metastore-alone" is the metastore with a client that sends every ack
// alone (client.Config.MaxAckRequests -1), the way separate worker
// processes of one task each would, for comparisons with what the
// client's batching of acks gives.
var extraSystemNames = []string{"metastore-alone"}

// systemOptions configure the systems the command builds.
type systemOptions struct {
	// Log receives progress (package installs).
	Log *log.Logger
	// MetastoreFlags are added to every metastore member's serve command.
	MetastoreFlags []string
}

// systemSpec is how the command makes one system under test.
type systemSpec struct {
	// debianPackage ships the server of a peer; empty for the metastore,
	// which is built from this tree.
	debianPackage string
	// find returns an error (wrapping a *procs.NotInstalledError) when the
	// server's programs are missing; nil means there is nothing to find.
	find func() error
	// install installs debianPackage with apt-get (as root).
	install func(ctx context.Context) error
	// build returns the system, not started.
	build func(systemOptions) (sut.System, error)
}

var systemSpecs = map[string]systemSpec{
	"metastore": {
		build: func(o systemOptions) (sut.System, error) {
			return mssut.New(mssut.Options{ExtraFlags: o.MetastoreFlags}), nil
		},
	},
	"metastore-alone": {
		build: func(o systemOptions) (sut.System, error) {
			return mssut.New(mssut.Options{ExtraFlags: o.MetastoreFlags, Name: "metastore-alone", MaxAckRequests: -1}), nil
		},
	},
	// The peers, each in the designs its careful users would build: lean
	// (one fenced transaction per ack, no record shared between the tasks
	// of a job), for etcd also lean with the acks batched into nested
	// transactions, and cas (a compare-and-swap on the epoch record the
	// tasks share).
	"etcd": {
		debianPackage: etcdsut.DebianPackage,
		find:          func() error { _, err := etcdsut.Find(); return err },
		install:       etcdsut.Install,
		build:         func(systemOptions) (sut.System, error) { return etcdsut.New(), nil },
	},
	"etcd-batched": {
		debianPackage: etcdsut.DebianPackage,
		find:          func() error { _, err := etcdsut.Find(); return err },
		install:       etcdsut.Install,
		build:         func(systemOptions) (sut.System, error) { return etcdsut.NewBatched(), nil },
	},
	"etcd-cas": {
		debianPackage: etcdsut.DebianPackage,
		find:          func() error { _, err := etcdsut.Find(); return err },
		install:       etcdsut.Install,
		build:         func(systemOptions) (sut.System, error) { return etcdsut.NewCAS(), nil },
	},
	"zookeeper": {
		debianPackage: zksut.DebianPackage,
		find:          func() error { _, err := zksut.Find(); return err },
		install:       zksut.Install,
		build:         func(systemOptions) (sut.System, error) { return zksut.New(), nil },
	},
	"zookeeper-cas": {
		debianPackage: zksut.DebianPackage,
		find:          func() error { _, err := zksut.Find(); return err },
		install:       zksut.Install,
		build:         func(systemOptions) (sut.System, error) { return zksut.NewCAS(), nil },
	},
}

// newSystems returns the named systems, not started. A peer whose server
// is missing is installed from its Debian package when the command runs
// as root; otherwise the error names the package to install and the
// --systems that leaves the peer out. Every name is checked before the
// error is returned, so that it lists every problem.
func newSystems(ctx context.Context, names []string, opts systemOptions) ([]sut.System, error) {
	var systems []sut.System
	var errs []error
	for _, name := range names {
		spec, ok := systemSpecs[name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown system %q (known: %s)", name, strings.Join(slices.Concat(systemNames, extraSystemNames), ",")))
			continue
		}
		if err := ensureInstalled(ctx, name, spec, names, opts); err != nil {
			errs = append(errs, err)
			continue
		}
		sys, err := spec.build(opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		systems = append(systems, sys)
	}
	return systems, errors.Join(errs...)
}

// ensureInstalled finds the server of a peer and installs it when it is
// missing and the command runs as root.
func ensureInstalled(ctx context.Context, name string, spec systemSpec, names []string, opts systemOptions) error {
	if spec.find == nil {
		return nil
	}
	err := spec.find()
	if err == nil {
		return nil
	}
	others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == name })
	skip := "leave it out with --systems " + strings.Join(others, ",")
	if len(others) == 0 {
		skip = "choose other systems with --systems"
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s: %w; run as root to have it installed, or %s", name, err, skip)
	}
	if opts.Log != nil {
		opts.Log.Printf("%s: %v; installing the Debian package %s", name, err, spec.debianPackage)
	}
	if err := spec.install(ctx); err != nil {
		return fmt.Errorf("%s: install the Debian package %s: %w; or %s", name, spec.debianPackage, err, skip)
	}
	if err := spec.find(); err != nil {
		return fmt.Errorf("%s: still missing after installing %s: %w", name, spec.debianPackage, err)
	}
	return nil
}
