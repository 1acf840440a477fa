package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/boltcheck"
	"github.com/metastore/metastore/internal/mtls"
)

// Rebuilding a member.
//
// `metastore rebuild` takes the serve flags of a member whose data is
// damaged (or lost) plus --join, the HTTP addresses of running members, and:
//
//  1. checks that no process uses the data directory;
//  2. moves the member's Raft log, snapshots and state machine file aside
//     into DATA_DIR/quarantine-<UTC timestamp>/ (nothing is deleted);
//  3. asks the cluster to remove the member from the Raft configuration,
//     and waits until the leader has done so;
//  4. serves as `metastore serve` does with an empty data directory and
//     --join: the member asks to be added back as a voter, and the leader
//     sends it the whole state as a snapshot.
//
// Step 3 is what makes this safe. A member that lost its data has lost its
// Raft log and its record of the current term and of its vote. Restarted
// empty under its old id while it is still a voter, it would count towards
// a majority as if it still held the entries it acknowledged: a leader
// elected by it and another member that missed those entries would
// overwrite them, losing acknowledged writes; and it could grant a second
// vote in a term it already voted in, electing two leaders. Removed first,
// it counts for nothing until the leader has added it back, and is caught
// up by snapshot before it is needed for a majority. The other members'
// data is never touched: they only commit the two configuration changes.
//
// The flags are serve's; --initial-cluster is ignored (the member joins the
// running cluster). After the rebuild the member keeps serving; restart it
// later with its usual `metastore serve` command line.

// rebuildTimeout bounds the removal from the configuration.
const rebuildTimeout = 2 * time.Minute

func runRebuild(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, origin, err := loadConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "metastore: rebuild: %v (run 'metastore serve -h' for the flags)\n", err)
		return exitUsage
	}
	if err == nil {
		cfg.InitialCluster = nil // the member joins the running cluster
		err = validate(&cfg, origin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "metastore: %v\n", err)
		return exitUsage
	}
	if len(cfg.Join) == 0 {
		fmt.Fprintf(stderr, "metastore: rebuild: --join is required: the HTTP addresses of running members, which send this member the state\n")
		return exitUsage
	}
	log := newLogger(cfg, stderr).With("component", "rebuild")
	if err := rebuild(cfg, log); err != nil {
		log.Error("rebuild failed", "data_dir", cfg.DataDir, "node_id", cfg.NodeID, "err", err)
		return exitFailure
	}
	return serve(cfg, stderr)
}

func rebuild(cfg config.Config, log *slog.Logger) error {
	parts := []string{cfg.RaftDir(), cfg.SnapshotDir(), cfg.FSMPath(), cfg.FSMPath() + ".state", cfg.FSMPath() + ".discarded", cfg.FSMPath() + ".restore"}
	for _, p := range []string{filepath.Join(cfg.RaftDir(), "raft.db"), filepath.Join(cfg.RaftDir(), "wal", "wal-meta.db"), cfg.FSMPath()} {
		if err := boltcheck.NotInUse(p); err != nil {
			return err
		}
	}
	var present []string
	for _, p := range parts {
		if _, err := os.Lstat(p); err == nil {
			present = append(present, p)
		}
	}
	if len(present) > 0 {
		q, err := quarantineDir(cfg.DataDir, time.Now())
		if err != nil {
			return err
		}
		for _, p := range present {
			dst := filepath.Join(q, filepath.Base(p))
			if err := os.Rename(p, dst); err != nil {
				return fmt.Errorf("move %s to %s: %w", p, dst, err)
			}
		}
		if err := syncDir(cfg.DataDir); err != nil {
			return err
		}
		log.Warn("moved this member's Raft log, snapshots and state machine aside; nothing was deleted",
			"quarantine", q, "moved", present)
	} else {
		log.Info("the data directory holds no Raft or state machine files; nothing to move aside", "data_dir", cfg.DataDir)
	}

	ctx, cancel := context.WithTimeout(context.Background(), rebuildTimeout)
	defer cancel()
	if err := removeSelf(ctx, cfg, log); err != nil {
		return err
	}
	log.Info("removed from the Raft configuration; joining again as a new member, the state arrives by snapshot", "join", cfg.Join)
	return nil
}

// quarantineDir creates DATA_DIR/quarantine-<UTC timestamp>, with a
// suffix -2, -3... if a rebuild in the same second made one already.
func quarantineDir(dataDir string, now time.Time) (string, error) {
	base := filepath.Join(dataDir, "quarantine-"+now.UTC().Format("20060102T150405Z"))
	q := base
	for i := 2; ; i++ {
		err := os.Mkdir(q, 0o700)
		if err == nil {
			return q, nil
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return "", fmt.Errorf("create quarantine directory: %w", err)
		}
		q = fmt.Sprintf("%s-%d", base, i)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// removeSelf asks the members at cfg.Join to remove cfg.NodeID from the
// cluster until one of them confirms it (or says it is not a member).
//
// With TLS the request goes over https and presents the member's
// certificate; with --auth it carries the operator token of
// --auth-join-token-file (which the rejoin needs too).
func removeSelf(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	hc := &http.Client{Timeout: 30 * time.Second}
	if cfg.TLSEnabled() {
		material, err := mtls.NewReloader(mtls.Files{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile},
			mtls.Options{Logger: log})
		if err != nil {
			return fmt.Errorf("TLS material: %w", err)
		}
		hc.Transport = &http.Transport{Proxy: nil, DialTLSContext: material.DialTLS(&net.Dialer{Timeout: 10 * time.Second})}
	}
	_, token, err := authTokens(cfg)
	if err != nil {
		return err
	}
	if cfg.Auth && token == "" {
		return fmt.Errorf("with --auth, removing this member needs an operator token: set --auth-join-token-file")
	}
	var last error
	for backoff := 200 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		for _, addr := range cfg.Join {
			base := strings.TrimRight(addr, "/")
			if !strings.Contains(base, "://") {
				base = cfg.HTTPScheme() + "://" + base
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/v1/members/"+url.PathEscape(cfg.NodeID), nil)
			if err != nil {
				return err
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				last = err
				continue
			}
			var body struct {
				Error struct {
					Code      string `json:"code"`
					Message   string `json:"message"`
					Retryable bool   `json:"retryable"`
				} `json:"error"`
			}
			_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK:
				return nil
			case resp.StatusCode == http.StatusNotFound && body.Error.Code == "not_found":
				log.Info("this member is not in the cluster's configuration", "via", addr)
				return nil
			case resp.StatusCode >= 500 || body.Error.Retryable:
				last = fmt.Errorf("%s: HTTP %d %s: %s", addr, resp.StatusCode, body.Error.Code, body.Error.Message)
			default:
				return fmt.Errorf("the cluster refused to remove %s via %s: HTTP %d %s: %s",
					cfg.NodeID, addr, resp.StatusCode, body.Error.Code, body.Error.Message)
			}
		}
		log.Warn("removing this member from the cluster failed; retrying", "err", last)
		select {
		case <-ctx.Done():
			return fmt.Errorf("removing %s from the cluster: %w (last error: %v)", cfg.NodeID, ctx.Err(), last)
		case <-time.After(backoff):
		}
	}
}
