package leader

import (
	"context"
	"crypto/rand"
	"log/slog"
	"time"

	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/wire"
)

// AuthBootstrap returns the leader task that prepares authentication: it
// sets the object-URL signing key when none is set and, given a bootstrap
// token, creates it as an operator token when the cluster has no token.
// Both commands are conditional in the state machine, so every member may
// run this on every start: the first proposal wins and the rest change
// nothing. The secret is never logged.
func AuthBootstrap(p Proposer, f *fsm.FSM, logger *slog.Logger, bootstrapToken string) func(context.Context) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context) {
		untilDone(ctx, logger, "auth bootstrap", func() error {
			return authBootstrapOnce(ctx, p, f, logger, bootstrapToken)
		})
	}
}

// untilDone runs once until it succeeds or ctx ends, backing off from
// 100 ms to 5 s between failures, which it logs.
func untilDone(ctx context.Context, logger *slog.Logger, what string, once func() error) {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		err := once()
		if err == nil || ctx.Err() != nil {
			return
		}
		logger.Warn(what+" failed; retrying", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

func authBootstrapOnce(ctx context.Context, p Proposer, f *fsm.FSM, logger *slog.Logger, bootstrapToken string) error {
	if key, err := f.URLKey(); err != nil {
		return err
	} else if key == nil {
		k := make([]byte, fsm.URLKeyLen)
		if _, err := rand.Read(k); err != nil {
			return err
		}
		v, _, err := p.Propose(ctx, fsm.CmdURLKeyInit, fsm.URLKeyInit{Key: k})
		if err != nil {
			return err
		}
		if set, _ := v.(bool); set {
			logger.Info("object-URL signing key set")
		}
	}
	if bootstrapToken == "" {
		return nil
	}
	toks, _, err := f.Tokens()
	if err != nil {
		return err
	}
	if len(toks) > 0 {
		return nil
	}
	tc := fsm.TokenCreate{Accessor: fsm.NewAccessor(), Hash: wire.TokenHash(bootstrapToken), Role: wire.RoleOperator,
		Description: "bootstrap", Bootstrap: true}
	v, _, err := p.Propose(ctx, fsm.CmdTokenCreate, &tc)
	if err != nil {
		return err
	}
	if c, _ := v.(*fsm.TokenCreated); c != nil && c.Created {
		logger.Info("bootstrap operator token created", "accessor", c.Token.Accessor)
	}
	return nil
}
