package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/fsm"
	"github.com/metastore/metastore/internal/buildinfo"
	"github.com/metastore/metastore/node"
	"github.com/metastore/metastore/wire"
)

// Cluster commands: status, members, leader transfer.

func runStatus(inv *invocation, args []string) int {
	fs, o := inv.flags()
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	body, err := o.call(http.MethodGet, "/v1/status", func(ctx context.Context, c *client.Client) error { _, err := c.Status(ctx); return err })
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var st struct {
		node.Status
		Build buildinfo.Info `json:"build"`
	}
	if err := decodeJSON(body, &st); err != nil {
		return inv.fail(fmt.Errorf("status from %s: %w", o.addr, err))
	}
	printStatus(inv.stdout, st.Status, st.Build)
	return exitOK
}

func runMembersList(inv *invocation, args []string) int {
	fs, o := inv.flags()
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	body, err := o.call(http.MethodGet, "/v1/members", func(ctx context.Context, c *client.Client) error { _, err := c.Members(ctx); return err })
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	return printMembersAnswer(inv.stdout, inv.stderr, o.addr, body)
}

func runMembersAdd(inv *invocation, args []string) int {
	fs, o := inv.flags()
	var raftAddr, httpAddr string
	fs.StringVar(&raftAddr, "raft-addr", "", "Raft address (host:port) the new member advertises")
	fs.StringVar(&httpAddr, "http-addr", "", "HTTP address (host:port) the new member advertises")
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	for _, req := range []struct{ name, v string }{{"raft-addr", raftAddr}, {"http-addr", httpAddr}} {
		if req.v == "" {
			return inv.badUsage("--%s is required", req.name)
		}
		// The store refuses an address no member could dial; say so
		// before asking it.
		if err := fsm.CheckMemberAddr(req.name, req.v); err != nil {
			var re *wire.RuleError
			errors.As(err, &re)
			return inv.badUsage("--%s %s", req.name, re.Message)
		}
	}
	id := pos[0]
	body, err := o.call(http.MethodPost, "/v1/members", func(ctx context.Context, c *client.Client) error {
		_, err := c.AddMember(ctx, id, raftAddr, httpAddr)
		return err
	})
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	fmt.Fprintf(inv.stdout, "added member %s (raft %s, http %s)\n\n", id, raftAddr, httpAddr)
	return printMembersAnswer(inv.stdout, inv.stderr, o.addr, body)
}

func runMembersRemove(inv *invocation, args []string) int {
	fs, o := inv.flags()
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	id := pos[0]
	body, err := o.call(http.MethodDelete, apiPath("/v1/members", id), func(ctx context.Context, c *client.Client) error { _, err := c.RemoveMember(ctx, id); return err })
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	fmt.Fprintf(inv.stdout, "removed member %s\n\n", id)
	return printMembersAnswer(inv.stdout, inv.stderr, o.addr, body)
}

func runLeaderTransfer(inv *invocation, args []string) int {
	fs, o := inv.flags()
	if _, code, ok := inv.parse(fs, args, 0); !ok {
		return code
	}
	body, err := o.call(http.MethodPost, "/v1/leader/transfer", func(ctx context.Context, c *client.Client) error { _, err := c.TransferLeadership(ctx); return err })
	if err != nil {
		return inv.fail(err)
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var answer struct {
		PreviousLeader string `json:"previous_leader"`
		LeaderID       string `json:"leader_id"`
	}
	if err := decodeJSON(body, &answer); err != nil {
		return inv.fail(fmt.Errorf("leader transfer from %s: %w", o.addr, err))
	}
	if answer.LeaderID == "" || answer.LeaderID == answer.PreviousLeader {
		fmt.Fprintf(inv.stdout, "%s handed over leadership; the new leader is not known yet (see 'metastore status')\n", answer.PreviousLeader)
	} else {
		fmt.Fprintf(inv.stdout, "leadership moved from %s to %s\n", answer.PreviousLeader, answer.LeaderID)
	}
	return exitOK
}

// printMembersAnswer prints the member table of an answer that carries
// {"members":[...]} (members list, add and remove).
func printMembersAnswer(stdout, stderr io.Writer, addr string, body []byte) int {
	var answer struct {
		Members []node.MemberStatus `json:"members"`
	}
	if err := decodeJSON(body, &answer); err != nil {
		return reportClientError(stderr, fmt.Errorf("members from %s: %w", addr, err))
	}
	printMembers(stdout, answer.Members)
	return exitOK
}

func printMembers(w io.Writer, members []node.MemberStatus) {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tRAFT ADDR\tHTTP ADDR\tSUFFRAGE\tLEADER")
	for _, m := range members {
		leader := "-"
		if m.Leader {
			leader = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, orDash(m.RaftAddr), orDash(m.HTTPAddr), orDash(m.Suffrage), leader)
	}
	tw.Flush()
}

func printStatus(w io.Writer, st node.Status, build buildinfo.Info) {
	tw := newTable(w)
	fmt.Fprintf(tw, "node\t%s\n", st.ID)
	fmt.Fprintf(tw, "version\t%s\n", describeBuild(build))
	fmt.Fprintf(tw, "state\t%s\n", orDash(st.State))
	leader := "none known"
	if st.LeaderID != "" {
		leader = fmt.Sprintf("%s (http %s, raft %s)", st.LeaderID, orDash(st.LeaderHTTPAddr), orDash(st.LeaderRaftAddr))
	}
	fmt.Fprintf(tw, "leader\t%s\n", leader)
	fmt.Fprintf(tw, "term\t%d\n", st.Term)
	fmt.Fprintf(tw, "commit index\t%d\n", st.CommitIndex)
	fmt.Fprintf(tw, "applied index\t%d\n", st.AppliedIndex)
	fmt.Fprintf(tw, "last log index\t%d\n", st.LastLogIndex)
	fmt.Fprintf(tw, "last snapshot index\t%d\n", st.LastSnapshotIndex)
	tw.Flush()
	fmt.Fprintln(w)
	printMembers(w, st.Members)
}

// describeBuild is a build in one line: "v1.2.0 (revision 0123abc, go1.26.8)".
func describeBuild(b buildinfo.Info) string {
	if b.Version == "" {
		return "-"
	}
	rev := "revision unknown"
	if b.Revision != "" {
		rev = "revision " + b.Revision
		if b.Modified {
			rev += ", modified"
		}
	}
	return fmt.Sprintf("%s (%s, %s)", b.Version, rev, orDash(b.GoVersion))
}
