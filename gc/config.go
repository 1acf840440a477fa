package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metastore/metastore/blobstore"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// Defaults of Config. A zero field takes its default, except OrphanEvery,
// where zero disables the orphan sweep (DefaultConfig sets it).
const (
	DefaultInterval      = 30 * time.Second
	DefaultGrace         = 10 * time.Minute
	DefaultBatchSize     = 1000
	DefaultTombstoneTTL  = 24 * time.Hour
	DefaultOrphanGrace   = time.Hour
	DefaultOrphanEvery   = time.Hour
	DefaultDeleteTimeout = time.Minute

	// MaxBatchSize is the largest BatchSize: the most keys one S3
	// DeleteObjects request carries.
	MaxBatchSize = blobstore.MaxDeleteBatch

	// VerifyConcurrency bounds the HEAD requests Verify, and a pass of the
	// observer of new blobs, have in flight.
	VerifyConcurrency = 16

	// DefaultObserveDelay, DefaultObservePass and DefaultObserveBatch: the
	// observer of new blobs gathers them for up to a second after an ack,
	// or until 10,000 wait, before a pass, and proposes them 1,000 to a
	// blobs-observed entry (Config.ObserveDelay, ObservePass, ObserveBatch).
	DefaultObserveDelay = time.Second
	DefaultObservePass  = 10 * MaxObserveBatch
	DefaultObserveBatch = MaxObserveBatch
	// MaxObserveBatch is the largest ObserveBatch: the most blobs one
	// blobs-observed entry carries.
	MaxObserveBatch = wire.MaxIntents
)

// Config tunes the collector.
type Config struct {
	// Interval is the time between cycles of Run.
	Interval time.Duration
	// Grace is how long a blob must have been unreferenced (or its intent's
	// lease over) before it may be marked deleting.
	Grace time.Duration
	// BatchSize is the number of keys per deletion mark (one Raft entry)
	// and per object-store Delete call; at most MaxBatchSize.
	BatchSize int
	// Rate is the most object deletions per second (0: unlimited). When it
	// is below BatchSize, Delete calls carry at most Rate keys each, so
	// deletions are spread evenly rather than sent in bursts.
	Rate float64
	// TombstoneTTL is how long records of gone blobs are kept.
	TombstoneTTL time.Duration
	// OrphanGrace is the age (object modification time) an object unknown
	// to the state machine must exceed before the orphan sweep deletes it.
	OrphanGrace time.Duration
	// OrphanEvery is the period of the orphan sweep; 0 disables it (a
	// RunOnce with Orphans set still sweeps).
	OrphanEvery time.Duration
	// Prefix is the key prefix the sweep lists ("" = everything the store
	// holds): empty or a valid key followed by "/".
	Prefix string
	// DeleteTimeout bounds one object-store Delete call. A call that runs
	// out of time counts as failed: its keys stay deleting and are retried.
	DeleteTimeout time.Duration
	// ObserveDelay is how long the leader's observer of new blobs gathers
	// them after an ack wakes it, before its pass (a listing or a HEAD per
	// directory and time window, blobs-observed entries for all): the
	// pass starts ObserveDelay after the first ack, or as soon as
	// ObservePass new blobs wait, whichever comes first. Under load the
	// delay sets how often a directory is listed. Zero: DefaultObserveDelay.
	ObserveDelay time.Duration
	// ObservePass is the number of new blobs that start a pass at once,
	// and the most one pass reads from the object store together (one
	// listing covers all of them in a directory and time window). Zero:
	// DefaultObservePass.
	ObservePass int
	// ObserveBatch is the most blobs one blobs-observed entry carries (at
	// most MaxObserveBatch): a pass proposes its observations in entries
	// of ObserveBatch. Zero: DefaultObserveBatch.
	ObserveBatch int
}

// DefaultConfig returns the defaults, the orphan sweep enabled.
func DefaultConfig() Config {
	return Config{
		Interval:      DefaultInterval,
		Grace:         DefaultGrace,
		BatchSize:     DefaultBatchSize,
		TombstoneTTL:  DefaultTombstoneTTL,
		OrphanGrace:   DefaultOrphanGrace,
		OrphanEvery:   DefaultOrphanEvery,
		DeleteTimeout: DefaultDeleteTimeout,
		ObserveDelay:  DefaultObserveDelay,
		ObservePass:   DefaultObservePass,
		ObserveBatch:  DefaultObserveBatch,
	}
}

// withDefaults fills zero fields and checks the result.
func (c Config) withDefaults() (Config, error) {
	if c.Interval < 0 || c.Grace < 0 || c.TombstoneTTL < 0 || c.OrphanGrace < 0 || c.OrphanEvery < 0 || c.DeleteTimeout < 0 || c.ObserveDelay < 0 {
		return c, errors.New("gc: durations cannot be negative")
	}
	if c.BatchSize < 0 || c.BatchSize > MaxBatchSize {
		return c, fmt.Errorf("gc: batch size %d is not between 1 and %d", c.BatchSize, MaxBatchSize)
	}
	if c.ObserveBatch < 0 || c.ObserveBatch > MaxObserveBatch {
		return c, fmt.Errorf("gc: observe batch %d is not between 1 and %d", c.ObserveBatch, MaxObserveBatch)
	}
	if c.ObservePass < 0 {
		return c, fmt.Errorf("gc: observe pass %d is negative", c.ObservePass)
	}
	if c.Rate < 0 {
		return c, errors.New("gc: rate cannot be negative")
	}
	if err := blobstore.ValidatePrefix(c.Prefix); err != nil {
		return c, fmt.Errorf("gc: prefix: %w", err)
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.TombstoneTTL == 0 {
		c.TombstoneTTL = DefaultTombstoneTTL
	}
	if c.OrphanGrace == 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.DeleteTimeout == 0 {
		c.DeleteTimeout = DefaultDeleteTimeout
	}
	if c.ObserveDelay == 0 {
		c.ObserveDelay = DefaultObserveDelay
	}
	if c.ObserveBatch == 0 {
		c.ObserveBatch = DefaultObserveBatch
	}
	if c.ObservePass == 0 {
		c.ObservePass = DefaultObservePass
	}
	return c, nil
}

// Deps are what the collector works with.
type Deps struct {
	// FSM is the local state machine, read after VerifyLeader.
	FSM *fsm.FSM
	// Store is the object store holding the blobs.
	Store blobstore.Store
	// Propose proposes a command, stamped with Now, and returns its value
	// and index once applied on this (leader) member, or its rule
	// violation: node.Node.Propose.
	Propose func(ctx context.Context, t fsm.CommandType, payload any) (any, uint64, error)
	// VerifyLeader confirms leadership with a quorum and that the local FSM
	// reflects every committed write: node.LinearizableRead.
	VerifyLeader func(ctx context.Context) error
	// Logger may be nil (logs are discarded).
	Logger *slog.Logger
	// Registerer, when not nil, gets the metastore_gc_* metrics.
	Registerer prometheus.Registerer
	// Now is the clock Propose stamps into commands, which the collector
	// compares the state with (grace, leases, tombstones): node.Node.Now.
	Now func() time.Time
}
