package fsm

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/metastore/metastore/wire"
)

// MaxMemberAddrLen bounds a member's address (host:port).
const MaxMemberAddrLen = 256

// CheckMemberAddr checks the form of a member's Raft or HTTP address, the
// address other members and clients dial: host:port with a port from 1 to
// 65535 and a host that is an IP address other than the unspecified one
// (0.0.0.0, ::) or a DNS name (labels of letters, digits and hyphens). It
// resolves nothing: the state machine calls it, and every member must
// reach the same verdict. The API and the CLI call it before proposing.
func CheckMemberAddr(field, addr string) error {
	if err := memberAddrProblem(addr); err != nil {
		return ruleErr(wire.CodeInvalid, field, "%q: %v", addr, err)
	}
	return nil
}

func memberAddrProblem(addr string) error {
	if addr == "" {
		return fmt.Errorf("required (host:port)")
	}
	if len(addr) > MaxMemberAddrLen {
		return fmt.Errorf("longer than %d bytes", MaxMemberAddrLen)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not host:port")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || port[0] == '0' {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	if host == "" {
		return fmt.Errorf("no host (other members must be able to dial it)")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.IsUnspecified() {
			return fmt.Errorf("%s is the unspecified address, not one other members can dial", host)
		}
		if ip.Zone() != "" {
			return fmt.Errorf("an IPv6 zone is only meaningful on one machine")
		}
		return nil
	}
	if strings.Contains(addr, "[") {
		return fmt.Errorf("%q in brackets is not an IPv6 address", host)
	}
	return checkDNSName(host)
}

// checkDNSName checks the form of a host name (RFC 1123): at most 253
// bytes, labels of 1 to 63 letters, digits and hyphens, not beginning or
// ending with a hyphen, and a last label that is not all digits (which
// would be a malformed IPv4 address).
func checkDNSName(host string) error {
	name := strings.TrimSuffix(host, ".")
	if len(name) == 0 || len(name) > 253 {
		return fmt.Errorf("host %q is not a DNS name or an IP address", host)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host %q is not a DNS name or an IP address", host)
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("host %q is not a DNS name or an IP address (%q is not allowed)", host, r)
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return nil
}
