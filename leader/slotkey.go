package leader

import (
	"context"
	"crypto/rand"
	"log/slog"

	"github.com/metastore/metastore/fsm"
)

// SlotKey returns the leader task that sets the key signing upload slots
// (fsm/upload_slots.go) when none is set. The command is conditional in
// the state machine, so every leader may run it: the first proposal wins.
// Until it is applied the API records upload slots through Raft. The
// secret is never logged.
func SlotKey(p Proposer, f *fsm.FSM, logger *slog.Logger) func(context.Context) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context) {
		untilDone(ctx, logger, "setting the upload-slot key", func() error { return slotKeyOnce(ctx, p, f, logger) })
	}
}

func slotKeyOnce(ctx context.Context, p Proposer, f *fsm.FSM, logger *slog.Logger) error {
	key, err := f.SlotKey()
	if err != nil || key != nil {
		return err
	}
	k := make([]byte, fsm.SlotKeyLen)
	if _, err := rand.Read(k); err != nil {
		return err
	}
	v, _, err := p.Propose(ctx, fsm.CmdSlotKeyInit, fsm.SlotKeyInit{Key: k})
	if err != nil {
		return err
	}
	if set, _ := v.(bool); set {
		logger.Info("upload-slot signing key set")
	}
	return nil
}
