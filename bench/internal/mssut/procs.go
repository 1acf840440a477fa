package mssut

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Packages the system builds from the tree.
const (
	metastorePackage = "github.com/metastore/metastore/cmd/metastore"
	s3serverPackage  = "github.com/metastore/metastore/cmd/s3server"
)

// buildBinary compiles pkg into out with the go tool, in dir (a directory
// of a module that requires the metastore module, or the metastore module
// itself).
func buildBinary(ctx context.Context, dir, pkg, out string) error {
	goTool := "go"
	if p, err := exec.LookPath("go"); err == nil {
		goTool = p
	} else if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		goTool = p
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, pkg)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mssut: go build -o %s %s (in %s): %w\n%s", out, pkg, dir, err, stderr.Bytes())
	}
	return nil
}

// sourceDir is the directory go build runs in when Options.SourceDir is
// empty: the directory of this source file when it still exists (a build
// from the checkout), else the working directory.
func sourceDir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		if dir := filepath.Dir(file); fileExists(dir) {
			return dir
		}
	}
	return "."
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// freeAddrs returns n distinct loopback addresses whose ports were free a
// moment ago: each is bound at once and released together, so the kernel
// does not hand the same port out twice.
func freeAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	out := make([]string, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("mssut: finding a free port: %w", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// proc is one metastore member process: its command line, which a restart
// repeats, and the running process, whose output goes to a log file.
type proc struct {
	id       string
	httpAddr string
	raftAddr string
	dataDir  string
	logPath  string
	bin      string
	args     []string
	env      []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the Wait result, once exited is closed
}

func (p *proc) url() string { return "http://" + p.httpAddr }

// start launches the process with its command line, appending its output
// to the log file.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.exited) {
		return fmt.Errorf("mssut: member %s is already running (pid %d)", p.id, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("mssut: member %s: log file: %w", p.id, err)
	}
	fmt.Fprintf(logf, "--- mssut: starting %s %s\n", p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("mssut: start member %s: %w", p.id, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.err = cmd, exited, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// running reports whether the process is up, with its pid.
func (p *proc) running() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.exited) {
		return 0, false
	}
	return p.cmd.Process.Pid, true
}

// exitErr describes how the process ended, with the tail of its log.
func (p *proc) exitErr() error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	return fmt.Errorf("mssut: member %s exited (%v); log %s ends:\n%s", p.id, err, p.logPath, logTail(p.logPath, 2048))
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || closed(exited) {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("mssut: kill member %s: %w", p.id, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("mssut: member %s (pid %d) still running 30s after SIGKILL", p.id, cmd.Process.Pid)
	}
}

func closed(ch chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		if _, err := f.Seek(st.Size()-n, io.SeekStart); err != nil {
			return err.Error()
		}
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// childEnv is the environment of the processes: this process's, without
// settings of the metastore or the AWS SDK that would change the members'
// configuration, plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "METASTORE_") || strings.HasPrefix(kv, "AWS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// s3Stats counts the requests the S3 server logged, by operation.
type s3Stats struct {
	Gets, Heads, Puts, DeleteObjects, Lists int64
}

// Requests is every object request counted (list requests excluded).
func (s s3Stats) Requests() int64 { return s.Gets + s.Heads + s.Puts + s.DeleteObjects }

func (s s3Stats) sub(o s3Stats) s3Stats {
	return s3Stats{Gets: s.Gets - o.Gets, Heads: s.Heads - o.Heads, Puts: s.Puts - o.Puts,
		DeleteObjects: s.DeleteObjects - o.DeleteObjects, Lists: s.Lists - o.Lists}
}

// s3Proc is the S3-protocol server process (cmd/s3server) with its request
// log (-v) read line by line: each request gofakes3 handles logs one line
// naming the operation ("GET OBJECT", "HEAD OBJECT", "CREATE OBJECT:",
// "delete multi", "LIST BUCKET") before it is answered.
type s3Proc struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	endpoint string
	exited   chan struct{}

	mu      sync.Mutex
	stats   s3Stats
	markers map[string]chan struct{} // HEAD keys awaited by sync
}

// markerPrefix starts the keys of the HEAD requests sync sends; they are
// not counted.
const markerPrefix = "mssut-sync/"

// startS3Server launches bin on a free loopback port, keeping objects in
// dir, and returns once it printed its address.
func startS3Server(ctx context.Context, bin, dir, bucket, accessKey, secretKey, logPath string) (*s3Proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("mssut: s3server log: %w", err)
	}
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--bucket", bucket, "--dir", dir,
		"--access-key", accessKey, "--secret-key", secretKey, "-v", "--exit-on-stdin-eof")
	cmd.Env = childEnv()
	cmd.SysProcAttr = childAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("mssut: start s3server: %w", err)
	}
	p := &s3Proc{cmd: cmd, stdin: stdin, exited: make(chan struct{}), markers: map[string]chan struct{}{}}
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		p.readLog(stderr, logf)
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if first {
				first = false
				addr <- strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
			}
		}
		close(addr)
	}()
	go func() {
		<-logDone
		_ = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	select {
	case a, ok := <-addr:
		if !ok || !strings.HasPrefix(a, "http://") {
			p.stop()
			return nil, fmt.Errorf("mssut: s3server did not print its address; log %s:\n%s", logPath, logTail(logPath, 2048))
		}
		p.endpoint = a
		return p, nil
	case <-ctx.Done():
		p.stop()
		return nil, fmt.Errorf("mssut: waiting for the s3server's address: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, fmt.Errorf("mssut: s3server printed no address within 30s; log %s:\n%s", logPath, logTail(logPath, 2048))
	}
}

// readLog counts the request lines of the server's log and copies the log
// to w.
func (p *s3Proc) readLog(r io.Reader, w io.Writer) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		bw.WriteString(line)
		bw.WriteByte('\n')
		_, msg, ok := strings.Cut(line, " INFO ")
		if !ok {
			continue
		}
		p.mu.Lock()
		switch {
		case strings.HasPrefix(msg, "GET OBJECT "):
			p.stats.Gets++
		case strings.HasPrefix(msg, "HEAD OBJECT "):
			f := strings.Fields(msg)
			if key := f[len(f)-1]; strings.HasPrefix(key, markerPrefix) {
				if ch, ok := p.markers[key]; ok {
					close(ch)
					delete(p.markers, key)
				}
			} else {
				p.stats.Heads++
			}
		case strings.HasPrefix(msg, "CREATE OBJECT:"):
			p.stats.Puts++
		case strings.HasPrefix(msg, "delete multi "):
			p.stats.DeleteObjects++
		case strings.HasPrefix(msg, "LIST BUCKET"):
			p.stats.Lists++
		}
		p.mu.Unlock()
	}
}

// awaitMarker registers a marker key before its HEAD is sent.
func (p *s3Proc) awaitMarker(key string) chan struct{} {
	ch := make(chan struct{})
	p.mu.Lock()
	p.markers[key] = ch
	p.mu.Unlock()
	return ch
}

func (p *s3Proc) dropMarker(key string) {
	p.mu.Lock()
	delete(p.markers, key)
	p.mu.Unlock()
}

func (p *s3Proc) counts() s3Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *s3Proc) pid() int { return p.cmd.Process.Pid }

// stop closes the server's standard input, which makes it shut down, and
// kills it if it has not exited within ten seconds.
func (p *s3Proc) stop() error {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("mssut: kill s3server: %w", err)
	}
	<-p.exited
	return nil
}

// dirBytes is the disk space the files under dir occupy (allocated
// blocks, as du counts them).
func dirBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking (a snapshot being replaced)
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		total += allocated(info)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("mssut: size of %s: %w", dir, err)
	}
	return total, nil
}
