package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The network of a cluster, all of it created by Start and removed by
// Close (or by RemoveLeftovers at the next Start after a crash):
//
//	bridge PREFIX-br (root namespace)  SUBNET.1/24
//	  veth PREFIX-nK  <->  eth0 in namespace PREFIX-nK   SUBNET.(10+K)/24
//
// In every member namespace the filter table holds a chain PREFIX-part,
// jumped to from OUTPUT, where Partition writes its DROP rules, and a
// rule that makes conntrack track the namespace from the start (so the
// --ctdir matches of one-way partitions classify every connection right).
// In the root namespace one FORWARD rule, tagged with the comment
// PREFIX-jepsen, accepts bridged traffic between the veths in case the
// machine's FORWARD policy drops (br_netfilter passes bridged frames
// through it).

// commandTimeout bounds one ip or iptables invocation.
const commandTimeout = 20 * time.Second

func run(ctx context.Context, name string, args ...string) (string, error) {
	return runInput(ctx, nil, name, args...)
}

func runInput(ctx context.Context, stdin []byte, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

// Supported reports why the suite cannot run here, or nil: it needs root,
// `ip netns` and iptables.
func Supported() error {
	if os.Geteuid() != 0 {
		return errors.New("the consistency suite needs root (network namespaces, veth pairs, iptables)")
	}
	for _, tool := range []string{"ip", "iptables", "iptables-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the consistency suite needs %s (apt-get install iproute2 iptables; .ci/run does)", tool)
		}
	}
	ctx := context.Background()
	if _, err := run(ctx, "ip", "netns", "list"); err != nil {
		return fmt.Errorf("ip netns is unavailable: %w", err)
	}
	return nil
}

// network names and addresses of one cluster.
type network struct {
	prefix string
	subnet string // first three octets, "10.77.0"
}

func (n network) bridge() string        { return n.prefix + "-br" }
func (n network) bridgeIP() string      { return n.subnet + ".1" }
func (n network) ns(id string) string   { return n.prefix + "-" + id }
func (n network) veth(id string) string { return n.prefix + "-" + id }
func (n network) chain() string         { return n.prefix + "-part" }
func (n network) comment() string       { return n.prefix + "-jepsen" }

// setup creates the bridge and one namespace per member id, with the
// member's address ip.
func (n network) setup(ctx context.Context, members map[string]string) error {
	steps := [][]string{
		{"ip", "link", "add", n.bridge(), "type", "bridge"},
		{"ip", "addr", "add", n.bridgeIP() + "/24", "dev", n.bridge()},
		{"ip", "link", "set", n.bridge(), "up"},
		{"iptables", "-w", "-I", "FORWARD", "-i", n.bridge(), "-o", n.bridge(), "-m", "comment", "--comment", n.comment(), "-j", "ACCEPT"},
	}
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ns, veth := n.ns(id), n.veth(id)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "link", "set", veth, "master", n.bridge()},
			[]string{"ip", "link", "set", veth, "up"},
			[]string{"ip", "-n", ns, "addr", "add", members[id] + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "netns", "exec", ns, "iptables", "-w", "-N", n.chain()},
			[]string{"ip", "netns", "exec", ns, "iptables", "-w", "-A", "OUTPUT", "-j", n.chain()},
			// Activates conntrack in the namespace; matches everything,
			// does nothing.
			[]string{"ip", "netns", "exec", ns, "iptables", "-w", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW,ESTABLISHED,RELATED,INVALID,UNTRACKED"},
		)
	}
	for _, s := range steps {
		if _, err := run(ctx, s[0], s[1:]...); err != nil {
			return fmt.Errorf("cluster: network setup: %w", err)
		}
	}
	return nil
}

// setRules replaces the partition rules of the namespace of id.
func (n network) setRules(ctx context.Context, id string, rules [][]string) error {
	var b strings.Builder
	b.WriteString("*filter\n")
	fmt.Fprintf(&b, "-F %s\n", n.chain())
	for _, r := range rules {
		fmt.Fprintf(&b, "-A %s %s\n", n.chain(), strings.Join(r, " "))
	}
	b.WriteString("COMMIT\n")
	if _, err := runInput(ctx, []byte(b.String()), "ip", "netns", "exec", n.ns(id), "iptables-restore", "-w", "--noflush"); err != nil {
		return fmt.Errorf("cluster: partition rules in %s: %w", n.ns(id), err)
	}
	return nil
}

// rules lists the partition rules of the namespace of id (for reports).
func (n network) rules(ctx context.Context, id string) (string, error) {
	return run(ctx, "ip", "netns", "exec", n.ns(id), "iptables", "-w", "-S", n.chain())
}

// RemoveLeftovers removes every namespace, link and root-namespace
// iptables rule whose name starts with prefix- (as Start creates them),
// killing the processes still running in those namespaces. It is what
// Start runs first, so a crashed run's leftovers never get in the way; it
// is idempotent.
func RemoveLeftovers(ctx context.Context, prefix string) error {
	n := network{prefix: prefix}
	var errs []error
	out, err := run(ctx, "ip", "netns", "list")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], prefix+"-") {
			continue
		}
		ns := fields[0]
		killNamespace(ctx, ns)
		if _, err := run(ctx, "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	out, err = run(ctx, "ip", "-o", "link", "show")
	if err != nil {
		errs = append(errs, err)
	}
	for _, line := range strings.Split(out, "\n") {
		// "7: msj-n1@if2: <BROADCAST,..." -> msj-n1
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(fields[1], ":"), "@")
		if strings.HasPrefix(name, prefix+"-") {
			if _, err := run(ctx, "ip", "link", "del", name); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
				errs = append(errs, err)
			}
		}
	}
	// Root namespace FORWARD rules tagged with our comment.
	for range 16 {
		out, err := run(ctx, "iptables", "-w", "-S", "FORWARD")
		if err != nil {
			break // no iptables: nothing of ours there
		}
		found := false
		for _, line := range strings.Split(out, "\n") {
			if !strings.HasPrefix(line, "-A FORWARD") || !strings.Contains(line, n.comment()) {
				continue
			}
			found = true
			args := append([]string{"-w", "-D"}, strings.Fields(strings.TrimPrefix(line, "-A "))...)
			// Comments are printed quoted when they hold spaces; ours
			// holds none.
			if _, err := run(ctx, "iptables", args...); err != nil {
				errs = append(errs, err)
			}
			break
		}
		if !found {
			break
		}
	}
	return errors.Join(errs...)
}

// killNamespace SIGKILLs every process in namespace ns and waits a little
// for them to go.
func killNamespace(ctx context.Context, ns string) {
	for range 50 {
		out, err := run(ctx, "ip", "netns", "pids", ns)
		if err != nil {
			return
		}
		pids := strings.Fields(out)
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}
