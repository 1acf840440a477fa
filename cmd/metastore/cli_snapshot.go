package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/metastore/metastore/client"
	"github.com/metastore/metastore/node"
)

// snapshot save and restore: a backup file is one JSON header line
// (node.BackupInfo) followed by exactly Size bytes whose SHA-256 is SHA256.
// Both commands check that on their side; the server checks it again.

// maxBackupHeader bounds the header line of a backup.
const maxBackupHeader = 64 << 10

// readBackupHeader reads and checks the header line of a backup; it
// returns the line, newline included, and what it says.
func readBackupHeader(br *bufio.Reader) ([]byte, *node.BackupInfo, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, nil, fmt.Errorf("no header line in its first %d bytes", maxBackupHeader)
	case errors.Is(err, io.EOF) && len(line) == 0:
		return nil, nil, errors.New("it is empty")
	case err != nil:
		return nil, nil, errors.New("its header line is incomplete")
	}
	line = bytes.Clone(line)
	info, err := node.ReadBackupInfo(bufio.NewReader(bytes.NewReader(line)))
	if err != nil {
		return nil, nil, errors.New(strings.TrimPrefix(err.Error(), node.ErrBadBackup.Error()+": "))
	}
	if sum, err := hex.DecodeString(info.SHA256); err != nil || len(sum) != sha256.Size {
		return nil, nil, fmt.Errorf("its header has no valid sha256 (%q)", info.SHA256)
	}
	return line, info, nil
}

// interruptible returns a context cancelled by SIGINT or SIGTERM, so an
// interrupted transfer cleans up after itself.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runSnapshotSave(inv *invocation, args []string) int {
	fs, o := newClientFlagsTimeout(inv.cmd.name, inv.getenv, streamTimeout)
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	file := pos[0]
	ctx, stop := interruptible()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := o.apiClient()
	if err != nil {
		return inv.fail(err)
	}
	backup, _, err := c.SnapshotReader(ctx)
	if err != nil {
		return inv.fail(o.describe(http.MethodGet, "/v1/snapshot", err))
	}
	defer backup.Close()
	line, info, err := saveBackup(ctx, o, backup, file)
	if err != nil {
		return inv.fail(fmt.Errorf("snapshot save: %v; nothing was written to %s", err, file))
	}
	if o.json {
		out, err := json.Marshal(map[string]any{"file": file, "saved": json.RawMessage(line)})
		if err != nil {
			return inv.fail(err)
		}
		return printJSON(inv.stdout, inv.stderr, out)
	}
	tw := newTable(inv.stdout)
	fmt.Fprintf(tw, "saved\t%s\n", file)
	fmt.Fprintf(tw, "index\t%d (term %d)\n", info.Index, info.Term)
	fmt.Fprintf(tw, "created\t%s\n", fmtTime(info.Created))
	fmt.Fprintf(tw, "size\t%s, after a %d-byte header\n", fmtBytes(uint64(info.Size)), len(line))
	fmt.Fprintf(tw, "sha256\t%s\n", info.SHA256)
	tw.Flush()
	return exitOK
}

// saveBackup streams the answer of GET /v1/snapshot into file.tmp, checking
// the size and hash its header announces as it writes, then syncs it and
// renames it to file. On any failure the temporary file is removed and file
// left as it was.
func saveBackup(ctx context.Context, o *clientOptions, body io.Reader, file string) (line []byte, info *node.BackupInfo, err error) {
	base, _ := o.baseURL()
	br := bufio.NewReaderSize(body, maxBackupHeader)
	line, info, err = readBackupHeader(br)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, o.readError(ctx, http.MethodGet, "/v1/snapshot", err)
		}
		return nil, nil, fmt.Errorf("the answer of %s is not a backup: %v", base, err)
	}

	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(line); err != nil {
		return nil, nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(br, info.Size))
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, nil, err // writing the file failed
		}
		return nil, nil, o.readError(ctx, http.MethodGet, "/v1/snapshot", err)
	}
	if n < info.Size {
		return nil, nil, fmt.Errorf("the backup from %s is truncated: %d of %d bytes arrived", base, n, info.Size)
	}
	if extra, _ := br.Read(make([]byte, 1)); extra > 0 {
		return nil, nil, fmt.Errorf("the backup from %s has data after the %d bytes its header announces", base, info.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != info.SHA256 {
		return nil, nil, fmt.Errorf("the backup from %s does not match its hash (sha256 %s, header says %s)", base, sum, info.SHA256)
	}
	if err = f.Sync(); err != nil {
		return nil, nil, err
	}
	if err = f.Close(); err != nil {
		return nil, nil, err
	}
	if err = os.Rename(tmp, file); err != nil {
		return nil, nil, err
	}
	// Make the rename durable; a directory that cannot be synced (some
	// file systems) does not undo the save.
	if d, derr := os.Open(filepath.Dir(file)); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return line, info, nil
}

// checkBackupFile checks a backup file as the server will: header, size,
// SHA-256. It returns the open file, positioned at its start, and its size.
func checkBackupFile(path string) (*os.File, *node.BackupInfo, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, 0, err
	}
	fail := func(format string, args ...any) (*os.File, *node.BackupInfo, int64, error) {
		f.Close()
		return nil, nil, 0, fmt.Errorf("%s is not a valid backup: "+format, append([]any{path}, args...)...)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, 0, err
	}
	if !st.Mode().IsRegular() {
		return fail("not a regular file")
	}
	br := bufio.NewReaderSize(f, maxBackupHeader)
	line, info, err := readBackupHeader(br)
	if err != nil {
		return fail("%v", err)
	}
	if got := st.Size() - int64(len(line)); got != info.Size {
		what := "truncated"
		if got > info.Size {
			what = "longer than its header says"
		}
		return fail("%s: %d bytes follow the header, which announces %d", what, got, info.Size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, br); err != nil {
		f.Close()
		return nil, nil, 0, err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != info.SHA256 {
		return fail("corrupt: its content does not match the sha256 of its header")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, 0, err
	}
	return f, info, st.Size(), nil
}

// confirmInput returns where the restore confirmation is read from, and
// whether it is an interactive terminal. Tests replace it.
var confirmInput = func() (io.Reader, bool) { return os.Stdin, isTerminal(os.Stdin) }

// isTerminal reports whether f is a character device other than the null
// device: a terminal, for asking a question.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(st, null) {
		return false
	}
	return true
}

func runSnapshotRestore(inv *invocation, args []string) int {
	fs, o := newClientFlagsTimeout(inv.cmd.name, inv.getenv, streamTimeout)
	var yes bool
	fs.BoolVar(&yes, "yes", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	pos, code, ok := inv.parse(fs, args, 1)
	if !ok {
		return code
	}
	file := pos[0]
	in, tty := confirmInput()
	if !yes && !tty {
		return inv.badUsage("this replaces the cluster's whole state; stdin is not a terminal to confirm it, so pass --yes")
	}
	base, err := o.baseURL()
	if err != nil {
		return inv.fail(err)
	}
	f, info, size, err := checkBackupFile(file)
	if err != nil {
		return inv.fail(fmt.Errorf("snapshot restore: %v; nothing was sent", err))
	}
	defer f.Close()
	if !yes {
		fmt.Fprintf(inv.stderr, "This replaces the whole state of the cluster at %s (every job, checkpoint and blob record)\n"+
			"with the backup %s: index %d, created %s, %s.\nType yes to continue: ",
			base, file, info.Index, fmtTime(info.Created), fmtBytes(uint64(info.Size)))
		answer, _ := bufio.NewReader(in).ReadString('\n')
		if strings.TrimSpace(answer) != "yes" {
			return inv.fail(errors.New("snapshot restore: not confirmed; nothing was sent"))
		}
	}
	ctx, stop := interruptible()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := o.apiClient()
	if err != nil {
		return inv.fail(err)
	}
	var body []byte
	if _, err := c.RestoreSnapshot(client.WithRawAnswer(ctx, &body), f, size); err != nil {
		return inv.fail(o.describe(http.MethodPut, "/v1/snapshot", err))
	}
	if o.json {
		return printJSON(inv.stdout, inv.stderr, body)
	}
	var answer struct {
		Restored node.BackupInfo `json:"restored"`
	}
	if err := decodeJSON(body, &answer); err != nil {
		return inv.fail(fmt.Errorf("snapshot restore answer from %s: %w", base, err))
	}
	r := answer.Restored
	fmt.Fprintf(inv.stdout, "restored %s onto the cluster at %s: index %d (term %d), created %s, %s, sha256 %s\n",
		file, base, r.Index, r.Term, fmtTime(r.Created), fmtBytes(uint64(r.Size)), r.SHA256)
	return exitOK
}
