package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"

	"github.com/metastore/metastore/client"
)

// clientTLS are the TLS flags of the client commands: the CA that the
// nodes' certificates chain to and an optional client certificate. With
// --ca-file set, a bare host:port (and the default address) means https.
type clientTLS struct {
	caFile, certFile, keyFile string
}

// register adds --ca-file, --cert-file and --key-file to fs, defaulting to
// METASTORE_CA_FILE, METASTORE_CERT_FILE and METASTORE_KEY_FILE.
func (t *clientTLS) register(fs *flag.FlagSet, getenv func(string) string) {
	t.caFile = getenv(envName("ca-file"))
	t.certFile = getenv(envName("cert-file"))
	t.keyFile = getenv(envName("key-file"))
	fs.StringVar(&t.caFile, "ca-file", t.caFile, "PEM CA bundle to verify the node's https certificate with ["+envName("ca-file")+"]")
	fs.StringVar(&t.certFile, "cert-file", t.certFile, "PEM client certificate to present (optional) ["+envName("cert-file")+"]")
	fs.StringVar(&t.keyFile, "key-file", t.keyFile, "PEM key of --cert-file ["+envName("key-file")+"]")
}

// enabled reports whether a TLS flag is set.
func (t *clientTLS) enabled() bool { return t.caFile != "" || t.certFile != "" }

// defaultScheme is the scheme of an address given without one.
func (t *clientTLS) defaultScheme() string {
	if t.enabled() {
		return "https"
	}
	return "http"
}

// httpClient is the HTTP client of the commands: the default one without
// TLS flags, else one with the CA and client certificate.
func (t *clientTLS) httpClient() (*http.Client, error) {
	if !t.enabled() {
		return http.DefaultClient, nil
	}
	if (t.certFile == "") != (t.keyFile == "") {
		return nil, errors.New("--cert-file and --key-file go together")
	}
	cfg, err := client.LoadTLSConfig(t.caFile, t.certFile, t.keyFile)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "client: "))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr}, nil
}

// tlsHint explains a failed https exchange in terms of the flags; empty
// when err is not about TLS.
func (t *clientTLS) tlsHint(err error) string {
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	switch {
	case errors.As(err, &unknown) && t.caFile == "":
		return " (the node's certificate is from a private CA: pass it with --ca-file)"
	case errors.As(err, &unknown):
		return fmt.Sprintf(" (the node's certificate does not chain to --ca-file %s)", t.caFile)
	case errors.As(err, &hostname):
		return " (the address is not among the names in the node's certificate: use one of them, or remake the certificate with it)"
	case errors.As(err, new(tls.RecordHeaderError)):
		return " (the node does not serve https: use an http:// address)"
	}
	return ""
}
