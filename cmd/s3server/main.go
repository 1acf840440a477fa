// Command s3server is an S3-protocol server for tests and local
// development, not for production: package internal/s3server (gofakes3
// with SigV4 checking) on a TCP address.
//
//	s3server --addr 127.0.0.1:0 --bucket NAME [--bucket NAME2] [--dir DIR]
//	         [--access-key ID --secret-key SECRET] [--auto-bucket] [-v]
//
// Once it accepts connections it prints one line on standard output,
//
//	listening on http://HOST:PORT
//
// so a test or a script started with port 0 can read the address. It serves
// until SIGTERM or SIGINT. Without --dir it keeps everything in memory; with
// it, in DIR/s3server.bolt, which survives restarts. With --access-key and
// --secret-key, only requests signed with those credentials (Signature
// Version 4, header or presigned URL) are served. --exit-on-stdin-eof makes
// it exit when its standard input closes, so a test that dies takes its
// server with it.
//
// blobstore/blobtest builds and starts it for tests; by hand:
//
//	go run ./cmd/s3server --bucket blobs --access-key test --secret-key testsecret
//	AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=testsecret metastore serve \
//	    --blob-store s3://blobs/ckpt --s3-endpoint http://127.0.0.1:PORT --s3-path-style
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/metastore/metastore/internal/s3server"
)

// shutdownGrace bounds how long in-flight requests may finish after a
// signal; then the remaining connections are closed. (net/http counts a
// connection that never sent a request as active for its first 5 seconds,
// and HTTP clients open such spare connections, so a graceful shutdown
// alone can stall.)
const shutdownGrace = 2 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "s3server:", err)
		os.Exit(1)
	}
}

// bucketList collects repeated (or comma-separated) --bucket values.
type bucketList []string

func (b *bucketList) String() string { return strings.Join(*b, ",") }

func (b *bucketList) Set(v string) error {
	for name := range strings.SplitSeq(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			*b = append(*b, name)
		}
	}
	return nil
}

// run serves until ctx is done (or stdin closes, with
// --exit-on-stdin-eof) and returns nil after a clean shutdown.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("s3server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var buckets bucketList
	addr := fs.String("addr", "127.0.0.1:0", "TCP address to listen on (port 0: any free port)")
	fs.Var(&buckets, "bucket", "bucket to create at start (repeatable, or comma-separated)")
	dir := fs.String("dir", "", "keep buckets in DIR/"+s3server.DBFile+" instead of memory")
	accessKey := fs.String("access-key", "", "access key id that requests must be signed with (needs --secret-key)")
	secretKey := fs.String("secret-key", "", "secret access key that requests must be signed with")
	autoBucket := fs.Bool("auto-bucket", false, "create a missing bucket on first use instead of answering NoSuchBucket")
	verbose := fs.Bool("v", false, "log requests to standard error")
	stdinEOF := fs.Bool("exit-on-stdin-eof", false, "exit when standard input reaches end of file")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: s3server --addr 127.0.0.1:0 --bucket NAME [--dir DIR] [flags]")
		fmt.Fprintln(fs.Output(), "An S3-protocol server for tests and development, not for production.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(buckets) == 0 && !*autoBucket {
		return errors.New("no bucket: give --bucket NAME (or --auto-bucket)")
	}
	opts := s3server.Options{
		Dir:             *dir,
		Buckets:         buckets,
		AutoBucket:      *autoBucket,
		AccessKeyID:     *accessKey,
		SecretAccessKey: *secretKey,
	}
	if *verbose {
		opts.Logger = log.New(stderr, "s3server: ", log.LstdFlags)
	}
	srv, err := s3server.New(opts)
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(stderr, "s3server: http: ", log.LstdFlags),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if _, err := fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr()); err != nil {
		_ = hs.Close()
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			cancel()
		}()
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "s3server: connections still open after %s, closing them\n", shutdownGrace)
		if err := hs.Close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
	}
	return nil
}
