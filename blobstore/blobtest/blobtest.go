// Package blobtest gives tests a real S3-protocol server, run as its own
// process, and blobstore.S3 stores that talk to it.
//
// StartS3Server builds cmd/s3server once per test binary (with the go tool
// on PATH, from the module that contains the test) and starts it on a free
// loopback port; NewS3Store returns a store signed with the credentials the
// server checks. A test that cannot build or start the server fails: there
// is no in-process fallback, so a green test always went through a separate
// process, the SDK's HTTP transport and SigV4 signing.
package blobtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metastore/metastore/blobstore"
)

// Credentials and region of the test server. The server accepts only
// requests signed with these.
const (
	AccessKeyID     = "blobtest"
	SecretAccessKey = "blobtest-secret-access-key"
	Region          = "us-east-1"
)

const (
	serverPackage = "github.com/metastore/metastore/cmd/s3server"
	// startTimeout bounds the wait for the server's address line.
	startTimeout = 30 * time.Second
	// stopTimeout bounds the wait for the server to exit after SIGTERM,
	// before it is killed.
	stopTimeout = 10 * time.Second
	// buildTimeout bounds go build of the server.
	buildTimeout = 5 * time.Minute
)

var binary struct {
	once sync.Once
	path string
	err  error
}

// S3ServerBinary returns the path of a cmd/s3server binary built from the
// current module, building it on the first call of the test binary. The
// binary lives in the user's cache directory (one per module checkout) and
// is replaced atomically, so test binaries running in parallel share it
// safely.
func S3ServerBinary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() { binary.path, binary.err = buildServer() })
	if binary.err != nil {
		t.Fatalf("blobtest: cannot build the S3 server process (cmd/s3server), which these tests need; "+
			"is the go tool on PATH? %v", binary.err)
	}
	return binary.path
}

func buildServer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module")
	}
	root := filepath.Dir(gomod)

	cacheRoot, err := os.UserCacheDir()
	if err != nil {
		cacheRoot = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cacheRoot, "metastore-blobtest", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "s3server-build-*")
	if err != nil {
		return "", err
	}
	tmpPath := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(tmpPath)

	build := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", tmpPath, serverPackage)
	build.Dir = root
	var stderr bytes.Buffer
	build.Stderr = &stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %w\n%s", serverPackage, root, err, stderr.Bytes())
	}
	final := filepath.Join(dir, "s3server")
	if err := os.Rename(tmpPath, final); err != nil {
		return "", err
	}
	return final, nil
}

// lockedBuffer collects a process's standard error.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Server is a running cmd/s3server process.
type Server struct {
	// Endpoint is the server's base URL, "http://127.0.0.1:PORT".
	Endpoint string
	cmd      *exec.Cmd
	stdin    io.Closer
	stderr   *lockedBuffer
	exited   chan struct{}
	waitErr  error
}

// StartS3Server starts an S3-protocol server process holding bucket, in
// memory, checking signatures made with AccessKeyID and SecretAccessKey,
// and returns its endpoint. The process is stopped when the test ends.
func StartS3Server(t testing.TB, bucket string) (endpoint string) {
	t.Helper()
	return StartS3ServerProcess(t, "--bucket", bucket).Endpoint
}

// StartS3ServerProcess starts cmd/s3server on a free loopback port with the
// test credentials and the extra arguments given (say "--bucket", "b",
// "--dir", dir), waits for its address line, and stops it (SIGTERM, then
// kill) when the test ends. The server also exits if the test binary dies,
// because its standard input closes.
func StartS3ServerProcess(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := S3ServerBinary(t)
	s, err := start(bin, args)
	if err != nil {
		t.Fatalf("blobtest: start S3 server process: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("blobtest: stop S3 server: %v", err)
		}
		if t.Failed() {
			t.Logf("blobtest: S3 server %s stderr:\n%s", s.Endpoint, s.stderr.String())
		}
	})
	return s
}

func start(bin string, args []string) (*Server, error) {
	full := append([]string{
		"--addr", "127.0.0.1:0",
		"--access-key", AccessKeyID,
		"--secret-key", SecretAccessKey,
		"--exit-on-stdin-eof",
	}, args...)
	cmd := exec.Command(bin, full...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	cmd.Stdout = pw
	s := &Server{cmd: cmd, stdin: stdin, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		_ = pw.Close()
		return nil, err
	}
	_ = pw.Close()
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()

	type result struct {
		line string
		err  error
	}
	lines := make(chan result, 1)
	go func() {
		br := bufio.NewReader(pr)
		line, err := br.ReadString('\n')
		lines <- result{line, err}
		_, _ = io.Copy(io.Discard, br) // the server prints nothing more; never block it
	}()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	var res result
	select {
	case res = <-lines:
	case <-deadline.C:
		_ = s.Stop()
		return nil, fmt.Errorf("no address line within %s; stderr:\n%s", startTimeout, s.stderr.String())
	}
	if res.err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("reading address line: %w; stderr:\n%s", res.err, s.stderr.String())
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(res.line), "listening on ")
	if u, err := url.Parse(addr); !ok || err != nil || u.Scheme != "http" || u.Host == "" {
		_ = s.Stop()
		return nil, fmt.Errorf("unexpected first line %q; stderr:\n%s", res.line, s.stderr.String())
	}
	s.Endpoint = addr
	return s, nil
}

// Stop sends SIGTERM, waits for the process to exit (killing it after a
// while) and reports an unclean exit. Calling it again does nothing.
func (s *Server) Stop() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.stdin.Close()
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a frozen server must see SIGTERM
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = s.cmd.Process.Kill()
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.exited:
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("server did not exit within %s of SIGTERM; killed", stopTimeout)
	}
	if s.waitErr != nil {
		return fmt.Errorf("server exited: %w", s.waitErr)
	}
	return nil
}

// Freeze stops the server process (SIGSTOP): the kernel still accepts
// connections into its backlog and buffers requests, and nothing answers,
// as with a hung S3 endpoint. Thaw (SIGCONT) lets it go on; Stop thaws it
// first. Freeze returns once the kernel reports the process stopped.
func (s *Server) Freeze() error {
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	deadline := time.Now().Add(stopTimeout)
	for {
		raw, err := os.ReadFile(stat)
		if err != nil {
			return fmt.Errorf("blobtest: freeze: %w", err)
		}
		// pid (comm) state ...: the state follows the last ")".
		if i := bytes.LastIndexByte(raw, ')'); i >= 0 && i+2 < len(raw) && (raw[i+2] == 'T' || raw[i+2] == 't') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("blobtest: freeze: process %d not stopped within %s", s.cmd.Process.Pid, stopTimeout)
		}
		runtime.Gosched()
	}
}

// Thaw resumes a frozen server process.
func (s *Server) Thaw() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// Stderr returns what the server process wrote to standard error so far.
func (s *Server) Stderr() string { return s.stderr.String() }

// NewS3Store returns a store on bucket under prefix at endpoint, with the
// test credentials, region us-east-1 and path-style addressing.
func NewS3Store(t testing.TB, endpoint, bucket, prefix string) *blobstore.S3 {
	t.Helper()
	s, err := blobstore.NewS3(context.Background(), Config(endpoint, bucket, prefix))
	if err != nil {
		t.Fatalf("blobtest: %v", err)
	}
	return s
}

// Config returns the S3Config NewS3Store uses, for tests that change a
// setting.
func Config(endpoint, bucket, prefix string) blobstore.S3Config {
	return blobstore.S3Config{
		Bucket:          bucket,
		Prefix:          prefix,
		Region:          Region,
		Endpoint:        endpoint,
		PathStyle:       true,
		AccessKeyID:     AccessKeyID,
		SecretAccessKey: SecretAccessKey,
		MaxAttempts:     3,
		Timeout:         time.Minute,
	}
}
