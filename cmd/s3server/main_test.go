package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore/blobtest"
)

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--bucket", "one,two", "--access-key", blobtest.AccessKeyID,
			"--secret-key", blobtest.SecretAccessKey}, strings.NewReader(""), pw, &stderr)
		_ = pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading address line: %v (stderr %s)", err, stderr.String())
	}
	endpoint, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok || !strings.HasPrefix(endpoint, "http://127.0.0.1:") {
		t.Fatalf("address line %q", line)
	}
	for _, bucket := range []string{"one", "two"} {
		s := blobtest.NewS3Store(t, endpoint, bucket, "")
		put := s.Put(ctx, "k", strings.NewReader("v"), 1)
		if put != nil {
			t.Fatalf("bucket %s: %v", bucket, put)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancel", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},                            // no bucket
		{"--bucket", "bkt", "extra"},  // stray argument
		{"--bucket", "B_ad"},          // invalid bucket name
		{"--bucket", "bkt", "--nope"}, // unknown flag
		{"--bucket", "bkt", "--addr", "256.0.0.1:x"},
		{"--bucket", "bkt", "--access-key", "only-id"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, strings.NewReader(""), &out, &errOut); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
		if out.Len() != 0 {
			t.Errorf("run(%q) printed %q on stdout", args, out.String())
		}
	}
}

// The binary as its own process: SIGTERM stops it cleanly (exit status 0,
// checked by Stop), and with --dir its objects survive a restart.
func TestProcessRestartKeepsDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first := blobtest.StartS3ServerProcess(t, "--bucket", "persist", "--dir", dir)
	s := blobtest.NewS3Store(t, first.Endpoint, "persist", "p")
	if err := s.Put(ctx, "blob", strings.NewReader("survives"), 8); err != nil {
		t.Fatal(err)
	}
	if err := first.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	second := blobtest.StartS3ServerProcess(t, "--bucket", "persist", "--dir", dir)
	s = blobtest.NewS3Store(t, second.Endpoint, "persist", "p")
	rc, err := s.Get(ctx, "blob", 0, -1)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "survives" {
		t.Fatalf("after restart got %q", b)
	}
}

func TestProcessExitsOnStdinEOF(t *testing.T) {
	cmd := exec.Command(blobtest.S3ServerBinary(t), "--bucket", "bkt", "--exit-on-stdin-eof")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("address line: %v (stderr %s)", err, stderr.String())
	}
	_ = stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v (stderr %s)", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("server kept running after its stdin closed")
	}
}
