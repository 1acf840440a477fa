package config

import (
	"errors"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.BlobStoreLocation() == "" || c.HTTPAdvertiseAddr() != DefaultHTTPAddr || c.RaftAdvertiseAddr() != DefaultRaftAddr {
		t.Fatalf("derived addresses: %q %q %q", c.BlobStoreLocation(), c.HTTPAdvertiseAddr(), c.RaftAdvertiseAddr())
	}
}

func TestValidateNamesTheSetting(t *testing.T) {
	cases := []struct {
		setting string
		mutate  func(*Config)
	}{
		{"node-id", func(c *Config) { c.NodeID = "bad id" }},
		{"data-dir", func(c *Config) { c.DataDir = " " }},
		{"http-addr", func(c *Config) { c.HTTPAddr = "nohostport" }},
		{"raft-addr", func(c *Config) { c.RaftAddr = "127.0.0.1" }},
		{"raft-advertise", func(c *Config) { c.RaftAddr = "0.0.0.0:7071" }},
		{"http-advertise", func(c *Config) { c.HTTPAddr = "0.0.0.0:7070" }},
		{"initial-cluster", func(c *Config) { c.InitialCluster = []Peer{{ID: "other", RaftAddr: "10.0.0.1:7071"}} }},
		{"initial-cluster", func(c *Config) {
			c.InitialCluster = []Peer{{ID: "node1", RaftAddr: DefaultRaftAddr}, {ID: "node1", RaftAddr: "10.0.0.1:1"}}
		}},
		{"join", func(c *Config) {
			c.InitialCluster = []Peer{{ID: "node1", RaftAddr: DefaultRaftAddr}}
			c.Join = []string{"10.0.0.1:7070"}
		}},
		{"election-timeout", func(c *Config) { c.ElectionTimeout = time.Millisecond }},
		{"leader-lease-timeout", func(c *Config) { c.LeaderLeaseTimeout = 2 * time.Second }},
		{"snapshot-threshold", func(c *Config) { c.SnapshotThreshold = 0 }},
		{"max-body-bytes", func(c *Config) { c.MaxBodyBytes = 10 }},
		{"blob-store", func(c *Config) { c.BlobStore = "gs://bucket" }},
		{"blob-store", func(c *Config) { c.BlobStore = "s3://" }},
		{"upload-lease", func(c *Config) { c.UploadLease = time.Millisecond }},
		{"gc-batch", func(c *Config) { c.GCBatch = 1001 }},
		{"apply-batch", func(c *Config) { c.ApplyBatch = 0 }},
		{"apply-inflight", func(c *Config) { c.ApplyInflight = -1 }},
		{"gc-rate", func(c *Config) { c.GCRate = -1 }},
		{"go-gc-percent", func(c *Config) { c.GoGCPercent = 0 }},
		{"state-commit-entries", func(c *Config) { c.StateCommitEntries = 0 }},
		{"state-commit-writes", func(c *Config) { c.StateCommitWrites = -1 }},
		{"go-gc-percent", func(c *Config) { c.GoGCPercent = 1001 }},
		{"log-level", func(c *Config) { c.LogLevel = "loud" }},
		{"log-format", func(c *Config) { c.LogFormat = "xml" }},
		{"tls-key-file", func(c *Config) { c.TLSCertFile, c.TLSCAFile = "n1.crt", "ca.crt" }},
		{"tls-cert-file", func(c *Config) { c.TLSKeyFile = "n1.key" }},
		{"tls-ca-file", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = "n1.crt", "n1.key" }},
		{"join", func(c *Config) {
			c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "n1.crt", "n1.key", "ca.crt"
			c.Join = []string{"http://10.0.0.1:7070"}
		}},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.mutate(&c)
		err := c.Validate()
		var ce *Error
		if !errors.As(err, &ce) || ce.Setting != tc.setting {
			t.Errorf("%s: got %v", tc.setting, err)
		}
	}
}

func TestTLSSettings(t *testing.T) {
	c := DefaultConfig()
	if c.TLSEnabled() || c.HTTPScheme() != "http" {
		t.Fatalf("default: TLS %v scheme %s", c.TLSEnabled(), c.HTTPScheme())
	}
	c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "n1.crt", "n1.key", "ca.crt"
	c.Join = []string{"10.0.0.1:7070", "https://10.0.0.2:7070"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.TLSEnabled() || c.HTTPScheme() != "https" {
		t.Fatalf("with files: TLS %v scheme %s", c.TLSEnabled(), c.HTTPScheme())
	}
	c.TLSKeyFile = ""
	err := c.Validate()
	if err == nil || err.Error() != "invalid --tls-key-file: required when --tls-cert-file and --tls-ca-file are set: TLS needs the certificate, its key and the CA file" {
		t.Fatalf("missing key: %v", err)
	}
}

func TestParseInitialCluster(t *testing.T) {
	peers, err := ParseInitialCluster("n2=127.0.0.1:2, n1=127.0.0.1:1")
	if err != nil || len(peers) != 2 || peers[0].ID != "n1" || peers[1].RaftAddr != "127.0.0.1:2" {
		t.Fatalf("%+v %v", peers, err)
	}
	for _, bad := range []string{"n1", "=127.0.0.1:1", "n1=", "n1=a,,"} {
		if _, err := ParseInitialCluster(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
