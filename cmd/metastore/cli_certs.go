package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/metastore/metastore/config"
	"github.com/metastore/metastore/internal/mtls"
)

// The certs commands make the TLS material of a cluster with the standard
// library only (ECDSA P-256): a CA, and member certificates signed by it
// for both server and client authentication. Keys are written mode 0600,
// every file atomically; existing files are not overwritten without
// --force.

func runCertsCA(inv *invocation, args []string) int {
	fs := certsFlagSet(inv.cmd.name)
	out := fs.String("out", "", "directory to write ca.crt and ca.key to (created mode 0700)")
	name := fs.String("name", "metastore CA", "common name of the CA")
	validity := daysValue(mtls.DefaultCAValidity)
	fs.Var(&validity, "validity", "lifetime of the CA certificate (e.g. 3650d, 87600h)")
	force := fs.Bool("force", false, "overwrite existing files")
	if code, ok := parseCerts(inv, fs, args); !ok {
		return code
	}
	if *out == "" {
		return inv.badUsage("--out is required")
	}
	ca, err := mtls.NewCA(*name, time.Duration(validity))
	if err != nil {
		return inv.fail(err)
	}
	certFile, keyFile, err := ca.WriteCA(*out, *force)
	if err != nil {
		return inv.fail(errors.New(strings.TrimPrefix(err.Error(), "mtls: ")))
	}
	fmt.Fprintf(inv.stdout, "wrote %s (give it to every member as --tls-ca-file and to clients as --ca-file)\nwrote %s (keep it secret: it signs member certificates)\nexpires %s\n",
		certFile, keyFile, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	return exitOK
}

func runCertsMember(inv *invocation, args []string) int {
	fs := certsFlagSet(inv.cmd.name)
	caDir := fs.String("ca-dir", "", "directory holding ca.crt and ca.key (made by 'metastore certs ca')")
	name := fs.String("name", "", "member name, by convention its --node-id; the files are NAME.crt and NAME.key")
	var ips, dnsNames multiValue
	fs.Var(&ips, "ip", "IP addresses the member is reached at, comma-separated or repeated (its --http-advertise host)")
	fs.Var(&dnsNames, "dns", "DNS names the member is reached at, comma-separated or repeated")
	out := fs.String("out", "", "directory to write NAME.crt and NAME.key to (default: --ca-dir)")
	validity := daysValue(mtls.DefaultMemberValidity)
	fs.Var(&validity, "validity", "lifetime of the certificate (e.g. 365d, 8760h); never past the CA's")
	force := fs.Bool("force", false, "overwrite existing files")
	if code, ok := parseCerts(inv, fs, args); !ok {
		return code
	}
	switch {
	case *caDir == "":
		return inv.badUsage("--ca-dir is required")
	case *name == "":
		return inv.badUsage("--name is required")
	case !config.IDPattern.MatchString(*name):
		return inv.badUsage("--name %q must match %s", *name, config.IDPattern)
	case len(ips) == 0 && len(dnsNames) == 0:
		return inv.badUsage("give at least one --ip or --dns: the addresses clients and members reach the member at")
	}
	opts := mtls.MemberOptions{Name: *name, DNSNames: dnsNames, Validity: time.Duration(validity)}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return inv.badUsage("--ip %q is not an IP address", s)
		}
		opts.IPs = append(opts.IPs, ip)
	}
	if *out == "" {
		*out = *caDir
	}
	ca, err := mtls.LoadCA(filepath.Join(*caDir, mtls.CACertFile), filepath.Join(*caDir, mtls.CAKeyFile))
	if err != nil {
		return inv.fail(errors.New(strings.TrimPrefix(err.Error(), "mtls: ")))
	}
	certFile, keyFile, err := ca.WriteMember(*out, opts, *force)
	if err != nil {
		return inv.fail(errors.New(strings.TrimPrefix(err.Error(), "mtls: ")))
	}
	fmt.Fprintf(inv.stdout, "wrote %s (--tls-cert-file)\nwrote %s (--tls-key-file)\nnames: %s\n",
		certFile, keyFile, strings.Join(append(append([]string{}, ips...), dnsNames...), ", "))
	return exitOK
}

func certsFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseCerts parses the flags of a certs command, which takes no
// positional arguments.
func parseCerts(inv *invocation, fs *flag.FlagSet, args []string) (int, bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(inv.stdout, "Usage: metastore %s\n\n%s.\n\nFlags:\n", inv.cmd.synopsis(), inv.cmd.summary)
		fs.SetOutput(inv.stdout)
		fs.PrintDefaults()
		return exitOK, false
	}
	if err != nil {
		return inv.badUsage("%v", err), false
	}
	if fs.NArg() > 0 {
		return inv.badUsage("unexpected argument %q", fs.Arg(0)), false
	}
	return 0, true
}

// multiValue collects a flag given repeatedly, each time possibly as a
// comma-separated list.
type multiValue []string

func (v *multiValue) String() string { return strings.Join(*v, ",") }

func (v *multiValue) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*v = append(*v, p)
		}
	}
	return nil
}

// daysValue is a duration that also accepts whole days ("365d").
type daysValue time.Duration

func (v *daysValue) String() string {
	d := time.Duration(*v)
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

func (v *daysValue) Set(s string) error {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return fmt.Errorf("%q is not a number of days or a duration", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("%q is not a number of days or a duration (e.g. 365d, 8760h)", s)
		}
	}
	if d <= 0 {
		return fmt.Errorf("%q must be positive", s)
	}
	*v = daysValue(d)
	return nil
}
