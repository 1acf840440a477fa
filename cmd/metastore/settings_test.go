package main

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/config"
)

// env returns a getenv over a fixed map.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestLoadConfigDefaults(t *testing.T) {
	cfg, origin, err := loadConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if want := config.DefaultConfig(); !reflect.DeepEqual(cfg, want) {
		t.Errorf("config with no flags and no environment:\n got %+v\nwant %+v", cfg, want)
	}
	if len(origin) != 0 {
		t.Errorf("origin = %v, want empty", origin)
	}
	if err := validate(&cfg, origin); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestLoadConfigPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want func(c *config.Config)
	}{
		{
			name: "env overrides default",
			env:  map[string]string{"METASTORE_NODE_ID": "n7", "METASTORE_HEARTBEAT_TIMEOUT": "2s"},
			want: func(c *config.Config) { c.NodeID = "n7"; c.HeartbeatTimeout = 2 * time.Second },
		},
		{
			name: "flag overrides env",
			env:  map[string]string{"METASTORE_NODE_ID": "n7", "METASTORE_SNAPSHOT_THRESHOLD": "100"},
			args: []string{"--node-id", "n8", "-snapshot-threshold=200"},
			want: func(c *config.Config) { c.NodeID = "n8"; c.SnapshotThreshold = 200 },
		},
		{
			name: "flag overrides default",
			args: []string{"--max-body-bytes", "131072", "--snapshot-retain", "5", "--log-format", "json"},
			want: func(c *config.Config) { c.MaxBodyBytes = 131072; c.SnapshotRetain = 5; c.LogFormat = "json" },
		},
		{
			name: "empty env is unset",
			env:  map[string]string{"METASTORE_NODE_ID": ""},
			want: func(c *config.Config) {},
		},
		{
			name: "initial cluster from env",
			env:  map[string]string{"METASTORE_INITIAL_CLUSTER": "n2=10.0.0.2:7071, n1=10.0.0.1:7071"},
			want: func(c *config.Config) {
				c.InitialCluster = []config.Peer{{ID: "n1", RaftAddr: "10.0.0.1:7071"}, {ID: "n2", RaftAddr: "10.0.0.2:7071"}}
			},
		},
		{
			name: "join list",
			args: []string{"--join", "10.0.0.1:7070, 10.0.0.2:7070"},
			want: func(c *config.Config) { c.Join = []string{"10.0.0.1:7070", "10.0.0.2:7070"} },
		},
		{
			name: "empty flag clears env list",
			env:  map[string]string{"METASTORE_JOIN": "10.0.0.1:7070"},
			args: []string{"--join="},
			want: func(c *config.Config) {},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := loadConfig(tc.args, env(tc.env), io.Discard)
			if err != nil {
				t.Fatalf("loadConfig: %v", err)
			}
			want := config.DefaultConfig()
			tc.want(&want)
			if !reflect.DeepEqual(cfg, want) {
				t.Errorf("\n got %+v\nwant %+v", cfg, want)
			}
		})
	}
}

func TestLoadConfigBadValues(t *testing.T) {
	for _, tc := range []struct {
		name        string
		env         map[string]string
		args        []string
		setting     string
		wantInError []string
	}{
		{
			name:        "bad duration flag",
			args:        []string{"--heartbeat-timeout", "5x"},
			setting:     "heartbeat-timeout",
			wantInError: []string{"invalid --heartbeat-timeout: ", `"5x" is not a duration`},
		},
		{
			name:        "bad duration env",
			env:         map[string]string{"METASTORE_ELECTION_TIMEOUT": "soon"},
			setting:     "election-timeout",
			wantInError: []string{"invalid --election-timeout: ", `"soon"`, "METASTORE_ELECTION_TIMEOUT"},
		},
		{
			name:        "bad initial cluster flag",
			args:        []string{"--initial-cluster", "n1=127.0.0.1:7071,n2"},
			setting:     "initial-cluster",
			wantInError: []string{"invalid --initial-cluster: ", `"n2" is not id=host:port`},
		},
		{
			name:        "bad initial cluster env",
			env:         map[string]string{"METASTORE_INITIAL_CLUSTER": "=x:1"},
			setting:     "initial-cluster",
			wantInError: []string{"invalid --initial-cluster: ", "METASTORE_INITIAL_CLUSTER"},
		},
		{
			name:        "negative unsigned",
			args:        []string{"--trailing-logs=-1"},
			setting:     "trailing-logs",
			wantInError: []string{"invalid --trailing-logs: ", "not a non-negative integer"},
		},
		{
			name:        "first bad flag is reported",
			args:        []string{"--snapshot-retain", "two", "--max-body-bytes", "big"},
			setting:     "snapshot-retain",
			wantInError: []string{"invalid --snapshot-retain: "},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := loadConfig(tc.args, env(tc.env), io.Discard)
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error = %v, want a *config.Error", err)
			}
			if ce.Setting != tc.setting {
				t.Errorf("setting = %q, want %q", ce.Setting, tc.setting)
			}
			for _, s := range tc.wantInError {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q spans several lines", err)
			}
		})
	}
}

func TestLoadConfigUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"stray"},
		{"--node-id"},
	} {
		_, _, err := loadConfig(args, env(nil), io.Discard)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("loadConfig(%q) error = %v, want a usage error", args, err)
		}
	}
	var help strings.Builder
	if _, _, err := loadConfig([]string{"-h"}, env(nil), &help); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("loadConfig(-h) error = %v, want flag.ErrHelp", err)
	}
	for _, s := range settings {
		if !strings.Contains(help.String(), "--"+s.name+"\n") || !strings.Contains(help.String(), envName(s.name)) {
			t.Errorf("serve -h does not describe --%s and %s", s.name, envName(s.name))
		}
	}
}

func TestValidateNamesEnvironment(t *testing.T) {
	e := env(map[string]string{"METASTORE_NODE_ID": "bad id!"})

	cfg, origin, err := loadConfig(nil, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	err = validate(&cfg, origin)
	if err == nil || !strings.HasPrefix(err.Error(), "invalid --node-id: ") || !strings.Contains(err.Error(), "METASTORE_NODE_ID") {
		t.Errorf("env-set node id: error = %v, want invalid --node-id naming METASTORE_NODE_ID", err)
	}

	cfg, origin, err = loadConfig([]string{"--node-id", "bad id?"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	err = validate(&cfg, origin)
	if err == nil || !strings.HasPrefix(err.Error(), "invalid --node-id: ") || strings.Contains(err.Error(), "METASTORE_NODE_ID") {
		t.Errorf("flag-set node id: error = %v, want invalid --node-id not naming the environment", err)
	}
}

// TestValidationErrorsNameFlags checks that the settings config.Validate
// reports are flags of serve, so an operator can act on the message.
func TestValidationErrorsNameFlags(t *testing.T) {
	names := map[string]bool{}
	for _, s := range settings {
		names[s.name] = true
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-id", "-x"}, "node-id"},
		{[]string{"--data-dir", " "}, "data-dir"},
		{[]string{"--http-addr", "nowhere"}, "http-addr"},
		{[]string{"--http-advertise", "0.0.0.0:1"}, "http-advertise"},
		{[]string{"--raft-addr", "nowhere"}, "raft-addr"},
		{[]string{"--raft-addr", "0.0.0.0:7071"}, "raft-advertise"},
		{[]string{"--raft-advertise", ":7071"}, "raft-advertise"},
		{[]string{"--initial-cluster", "n9=10.0.0.9:7071"}, "initial-cluster"},
		{[]string{"--initial-cluster", "node1=127.0.0.1:7071", "--join", "127.0.0.1:7080"}, "join"},
		{[]string{"--join", "a:1,,b:2"}, "join"},
		{[]string{"--heartbeat-timeout", "1ms"}, "heartbeat-timeout"},
		{[]string{"--election-timeout", "1ms"}, "election-timeout"},
		{[]string{"--leader-lease-timeout", "2s"}, "leader-lease-timeout"},
		{[]string{"--commit-timeout", "0s"}, "commit-timeout"},
		{[]string{"--snapshot-interval", "1ms"}, "snapshot-interval"},
		{[]string{"--snapshot-threshold", "0"}, "snapshot-threshold"},
		{[]string{"--snapshot-retain", "0"}, "snapshot-retain"},
		{[]string{"--apply-timeout", "1ms"}, "apply-timeout"},
		{[]string{"--max-body-bytes", "10"}, "max-body-bytes"},
		{[]string{"--shutdown-timeout", "-1s"}, "shutdown-timeout"},
		{[]string{"--s3-timeout", "0s"}, "s3-timeout"},
		{[]string{"--s3-attempt-timeout", "2h"}, "s3-attempt-timeout"},
		{[]string{"--s3-connect-timeout", "1ms"}, "s3-connect-timeout"},
		{[]string{"--s3-max-attempts", "0"}, "s3-max-attempts"},
		{[]string{"--log-level", "loud"}, "log-level"},
		{[]string{"--log-format", "xml"}, "log-format"},
	} {
		cfg, origin, err := loadConfig(tc.args, env(nil), io.Discard)
		if err != nil {
			t.Fatalf("loadConfig(%q): %v", tc.args, err)
		}
		err = validate(&cfg, origin)
		var ce *config.Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: Validate error = %v, want a *config.Error", tc.args, err)
			continue
		}
		if !names[ce.Setting] {
			t.Errorf("%q: Validate names %q, which is not a flag of serve", tc.args, ce.Setting)
		}
		if ce.Setting != tc.want {
			t.Errorf("%q: Validate names %q, want %q", tc.args, ce.Setting, tc.want)
		}
	}
}

// TestEveryFieldHasASetting checks that the table binds every field of
// config.Config exactly once, so a new field cannot be added without a flag
// and an environment variable.
func TestEveryFieldHasASetting(t *testing.T) {
	sample := map[reflect.Type]string{
		reflect.TypeFor[*stringValue]():   "sample-value",
		reflect.TypeFor[*durationValue](): "1.234s",
		reflect.TypeFor[*uint64Value]():   "12345",
		reflect.TypeFor[*intValue]():      "17",
		reflect.TypeFor[*int64Value]():    "99999",
		reflect.TypeFor[*peersValue]():    "s1=10.1.1.1:1",
		reflect.TypeFor[*listValue]():     "10.1.1.1:1",
		reflect.TypeFor[*boolValue]():     "true",
		reflect.TypeFor[*float64Value]():  "2.5",
	}
	fields := reflect.TypeFor[config.Config]()
	boundBy := map[string]string{}
	seen := map[string]bool{}
	for _, s := range settings {
		if seen[s.name] {
			t.Errorf("setting %q appears twice", s.name)
		}
		seen[s.name] = true

		def := config.DefaultConfig()
		cfg := config.DefaultConfig()
		v := s.value(&cfg)
		raw, ok := sample[reflect.TypeOf(v)]
		if !ok {
			t.Fatalf("setting %q: no sample value for %T", s.name, v)
		}
		if err := v.Set(raw); err != nil {
			t.Fatalf("setting %q: Set(%q): %v", s.name, raw, err)
		}
		if got := v.String(); got != raw {
			t.Errorf("setting %q: String() = %q after Set(%q)", s.name, got, raw)
		}
		var changed []string
		dv, cv := reflect.ValueOf(def), reflect.ValueOf(cfg)
		for _, f := range leafFields(fields) {
			if !reflect.DeepEqual(dv.FieldByIndex(f.Index).Interface(), cv.FieldByIndex(f.Index).Interface()) {
				changed = append(changed, f.Name)
			}
		}
		if len(changed) != 1 {
			t.Errorf("setting %q changes fields %v, want exactly one", s.name, changed)
			continue
		}
		if prev, dup := boundBy[changed[0]]; dup {
			t.Errorf("field %s is bound by both %q and %q", changed[0], prev, s.name)
		}
		boundBy[changed[0]] = s.name
	}
	for _, f := range leafFields(fields) {
		if boundBy[f.Name] == "" {
			t.Errorf("config.Config.%s has no setting", f.Name)
		}
	}
}

// leafFields are the fields of t with the fields of embedded structs (a
// group of settings, such as config.HTTPLimits) in place of the struct.
func leafFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for _, f := range reflect.VisibleFields(t) {
		if !f.Anonymous {
			out = append(out, f)
		}
	}
	return out
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"node-id":              "METASTORE_NODE_ID",
		"initial-cluster":      "METASTORE_INITIAL_CLUSTER",
		"leader-lease-timeout": "METASTORE_LEADER_LEASE_TIMEOUT",
		"addr":                 "METASTORE_ADDR",
	} {
		if got := envName(in); got != want {
			t.Errorf("envName(%q) = %q, want %q", in, got, want)
		}
	}
}
