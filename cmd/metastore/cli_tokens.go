package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/metastore/metastore/api"
	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/wire"
)

// Token commands, and the bearer token every client command sends.

// tokenFlags adds --token and --token-file, defaulting to METASTORE_TOKEN
// and METASTORE_TOKEN_FILE.
func (o *clientOptions) tokenFlags(fs *flag.FlagSet, getenv func(string) string) {
	o.token = getenv(envName("token"))
	o.tokenFile = getenv(envName("token-file"))
	fs.StringVar(&o.token, "token", o.token, "API token, for clusters run with --auth (prefer --token-file: a command line is visible to other users) ["+envName("token")+"]")
	fs.StringVar(&o.tokenFile, "token-file", o.tokenFile, "file holding the API token ["+envName("token-file")+"]")
}

// bearer returns the token of --token or --token-file ("" for none).
// Errors name the file, never the token.
func (o *clientOptions) bearer() (string, error) {
	if o.token != "" || o.tokenFile == "" {
		return o.token, nil
	}
	raw, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(raw))
	if tok == "" {
		return "", fmt.Errorf("--token-file %s is empty", o.tokenFile)
	}
	return tok, nil
}

// tokenAnswer is a token as the API shows it.
type tokenAnswer struct {
	Accessor    string    `json:"accessor"`
	Role        string    `json:"role"`
	Job         string    `json:"job"`
	JobPrefix   string    `json:"job_prefix"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	Secret      string    `json:"secret"`
}

func (t tokenAnswer) scope() string {
	switch {
	case t.Role == "operator":
		return "*"
	case t.Job != "":
		return "job " + t.Job
	default:
		return "prefix " + t.JobPrefix + "*"
	}
}

func runTokensCreate(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var role, job, prefix, desc string
	fs.StringVar(&role, "role", "", "operator (everything) or worker (one job or a job-name prefix)")
	fs.StringVar(&job, "job", "", "the one job a worker token may touch")
	fs.StringVar(&prefix, "job-prefix", "", "a worker token may touch every job whose name starts with this")
	fs.StringVar(&desc, "description", "", "free text shown by tokens list")
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	if role == "" {
		return inv.badUsage("--role is required")
	}
	body, err := o.call(http.MethodPost, "/v1/tokens", func(ctx context.Context, c *client.Client) error {
		_, err := c.CreateToken(ctx, client.TokenRequest{Role: wire.Role(role), Job: job, JobPrefix: prefix, Description: desc})
		return err
	})
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var t tokenAnswer
	if err := decodeJSON(body, &t); err != nil {
		return inv.fail(fmt.Errorf("token answer: %w", err))
	}
	fmt.Fprintf(inv.stdout, "created token %s (%s, %s)\nsecret: %s\n\nThe secret is shown only this once; store it now (a file readable only by the worker).\n",
		t.Accessor, t.Role, t.scope(), t.Secret)
	return exitOK
}

func runTokensList(inv *invocation, args []string) int {
	fs, o := inv.flags()
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	body, err := o.call(http.MethodGet, "/v1/tokens", func(ctx context.Context, c *client.Client) error { _, err := c.Tokens(ctx); return err })
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var ans struct {
		Tokens []tokenAnswer `json:"tokens"`
	}
	if err := decodeJSON(body, &ans); err != nil {
		return inv.fail(fmt.Errorf("tokens answer: %w", err))
	}
	tw := newTable(inv.stdout)
	fmt.Fprintln(tw, "ACCESSOR\tROLE\tSCOPE\tCREATED\tDESCRIPTION")
	for _, t := range ans.Tokens {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Accessor, t.Role, t.scope(), t.CreatedAt.UTC().Format(time.RFC3339), t.Description)
	}
	if err := tw.Flush(); err != nil {
		return inv.fail(err)
	}
	return exitOK
}

func runTokensRevoke(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var force bool
	fs.BoolVar(&force, "force", false, "revoke even the last operator token (nobody can manage tokens afterwards until a bootstrap)")
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	path := apiPath("/v1/tokens", pos[0])
	if force {
		path += "?force=true"
	}
	body, err := o.call(http.MethodDelete, path, func(ctx context.Context, c *client.Client) error {
		_, err := c.RevokeToken(ctx, pos[0], force)
		return err
	})
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	fmt.Fprintf(inv.stdout, "revoked token %s\n", pos[0])
	return exitOK
}

func runTokensGenerate(inv *invocation, args []string) int {
	fs := flag.NewFlagSet(inv.cmd.name, flag.ContinueOnError)
	fs.SetOutput(inv.stderr)
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	fmt.Fprintln(inv.stdout, api.GenerateToken())
	return exitOK
}
