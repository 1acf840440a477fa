package config

import (
	"errors"
	"strings"
	"testing"
)

// TestRaftExposure: --auth with a Raft address others reach and no TLS is
// refused, naming the override; loopback, TLS or --insecure-raft start.
func TestRaftExposure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tweak   func(c *Config)
		refused bool
	}{
		{"auth, loopback Raft", func(c *Config) { c.Auth = true }, false},
		{"auth, localhost Raft", func(c *Config) { c.Auth, c.RaftAddr = true, "localhost:7071" }, false},
		{"no auth, Raft on every interface", func(c *Config) { c.RaftAddr, c.RaftAdvertise = "0.0.0.0:7071", "192.0.2.1:7071" }, false},
		{"auth, Raft on every interface", func(c *Config) {
			c.Auth, c.RaftAddr, c.RaftAdvertise = true, "0.0.0.0:7071", "192.0.2.1:7071"
		}, true},
		{"auth, Raft on a routable address", func(c *Config) { c.Auth, c.RaftAddr = true, "192.0.2.1:7071" }, true},
		{"auth, loopback listener advertised elsewhere", func(c *Config) {
			c.Auth, c.RaftAdvertise = true, "192.0.2.1:7071"
		}, true},
		{"auth, Raft on the network, --insecure-raft", func(c *Config) {
			c.Auth, c.RaftAddr, c.InsecureRaft = true, "192.0.2.1:7071", true
		}, false},
		{"auth, Raft on the network, TLS", func(c *Config) {
			c.Auth, c.RaftAddr = true, "192.0.2.1:7071"
			c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "m.crt", "m.key", "ca.crt"
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.tweak(&c)
			err := c.Validate()
			var ce *Error
			switch {
			case tc.refused && (!errors.As(err, &ce) || ce.Setting != "auth" || !strings.Contains(ce.Problem, "--insecure-raft")):
				t.Fatalf("Validate = %v, want an --auth error naming --insecure-raft", err)
			case !tc.refused && err != nil:
				t.Fatalf("Validate = %v", err)
			}
		})
	}
}

func TestSecurityValidate(t *testing.T) {
	for _, tc := range []struct {
		setting string
		tweak   func(c *Config)
	}{
		{"allowed-origins", func(c *Config) { c.AllowedOrigins = []string{"console.example.com"} }},
		{"allowed-origins", func(c *Config) { c.AllowedOrigins = []string{"https://console.example.com/path"} }},
		{"allowed-hosts", func(c *Config) { c.AllowedHosts = []string{"metastore.internal:7070"} }},
		{"quota-open-intents", func(c *Config) { c.QuotaOpenIntents = -1 }},
		{"quota-live-bytes", func(c *Config) { c.QuotaLiveBytes = -1 }},
		{"quota-ack-rate", func(c *Config) { c.QuotaAckRate = -1 }},
		{"quota-ack-burst", func(c *Config) { c.QuotaAckBurst = 0 }},
		{"log-repeat-window", func(c *Config) { c.LogRepeatWindow = -1 }},
	} {
		c := DefaultConfig()
		tc.tweak(&c)
		var ce *Error
		if err := c.Validate(); !errors.As(err, &ce) || ce.Setting != tc.setting {
			t.Errorf("--%s: Validate = %v", tc.setting, err)
		}
	}
	for in, want := range map[string]string{
		"https://Console.Example.com:443": "https://console.example.com",
		"http://127.0.0.1:80":             "http://127.0.0.1",
		"http://[::1]:7070":               "http://[::1]:7070",
		"http://localhost:7070/":          "http://localhost:7070",
	} {
		if got, err := NormalizeOrigin(in); err != nil || got != want {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
