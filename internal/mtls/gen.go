package mtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Default validity periods of the certificates NewCA and NewMember make.
const (
	DefaultCAValidity     = 10 * 365 * 24 * time.Hour
	DefaultMemberValidity = 365 * 24 * time.Hour
)

// backdate is subtracted from NotBefore so a member whose clock is a little
// behind accepts a certificate made just now.
const backdate = 5 * time.Minute

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA (ECDSA P-256) named name, valid for
// validity from now, that can sign end-entity certificates only (path
// length 0).
func NewCA(name string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		return nil, errors.New("mtls: CA validity must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"metastore"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("mtls: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA certificate and its key (PEM) written by WriteCA.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("mtls: read CA certificate: %w", err)
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("mtls: %s holds no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("mtls: parse %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("mtls: %s is not a CA certificate", certFile)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("mtls: read CA key: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("mtls: %s holds no PEM \"PRIVATE KEY\" block", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("mtls: parse %s: %w", keyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("mtls: the key in %s does not belong to the certificate in %s", keyFile, certFile)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertPEM is the CA certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM is the CA key in PEM (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// MemberOptions describe a member certificate.
type MemberOptions struct {
	// Name is the certificate's common name (the node id, by convention).
	Name string
	// IPs and DNSNames are the subject alternative names: every address
	// the member's HTTP API is reached at (its --http-advertise host).
	IPs      []net.IP
	DNSNames []string
	// Validity is the lifetime from now (default DefaultMemberValidity),
	// cut to the CA's expiry.
	Validity time.Duration
}

// NewMember makes a member certificate signed by ca, for both server and
// client authentication, with a new ECDSA P-256 key. It returns the
// certificate and the key in PEM.
func (ca *CA) NewMember(o MemberOptions) (certPEM, keyPEMBytes []byte, err error) {
	if o.Name == "" {
		return nil, nil, errors.New("mtls: a member certificate needs a name")
	}
	if len(o.IPs) == 0 && len(o.DNSNames) == 0 {
		return nil, nil, errors.New("mtls: a member certificate needs at least one IP address or DNS name")
	}
	if o.Validity < 0 {
		return nil, nil, errors.New("mtls: validity cannot be negative")
	}
	if o.Validity == 0 {
		o.Validity = DefaultMemberValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	notAfter := now.Add(o.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, nil, fmt.Errorf("mtls: the CA %q expired on %s", ca.Cert.Subject.CommonName, ca.Cert.NotAfter)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: o.Name, Organization: []string{"metastore member"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  o.IPs,
		DNSNames:     o.DNSNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: create member certificate: %w", err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// WriteFileAtomic writes data to path with mode perm: into a temporary
// file in the same directory, synced, then renamed over path, and the
// directory synced. A reader sees the old content or the new, never a part.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// File names in a certificate directory: the CA's, and a member's by name.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// MemberCertFile and MemberKeyFile are the file names of member name's
// certificate and key.
func MemberCertFile(name string) string { return name + ".crt" }
func MemberKeyFile(name string) string  { return name + ".key" }

// WriteCA writes the CA's certificate (mode 0644) and key (mode 0600) to
// dir as ca.crt and ca.key, each atomically. Unless overwrite, it refuses
// when either file exists.
func (ca *CA) WriteCA(dir string, overwrite bool) (certFile, keyFile string, err error) {
	kp, err := ca.KeyPEM()
	if err != nil {
		return "", "", err
	}
	return writePair(dir, CACertFile, CAKeyFile, ca.CertPEM(), kp, overwrite)
}

// WriteMember makes a member certificate (NewMember) and writes it and its
// key to dir as NAME.crt (0644) and NAME.key (0600), each atomically. Unless
// overwrite, it refuses when either file exists.
func (ca *CA) WriteMember(dir string, o MemberOptions, overwrite bool) (certFile, keyFile string, err error) {
	cp, kp, err := ca.NewMember(o)
	if err != nil {
		return "", "", err
	}
	return writePair(dir, MemberCertFile(o.Name), MemberKeyFile(o.Name), cp, kp, overwrite)
}

func writePair(dir, certName, keyName string, certPEM, keyPEM []byte, overwrite bool) (string, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	certFile, keyFile := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if !overwrite {
		for _, f := range []string{certFile, keyFile} {
			if _, err := os.Lstat(f); err == nil {
				return "", "", fmt.Errorf("mtls: %s exists; not overwriting it", f)
			} else if !errors.Is(err, os.ErrNotExist) {
				return "", "", err
			}
		}
	}
	// The key goes first: a certificate on disk always has its key.
	if err := WriteFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("mtls: write %s: %w", keyFile, err)
	}
	if err := WriteFileAtomic(certFile, certPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("mtls: write %s: %w", certFile, err)
	}
	return certFile, keyFile, nil
}
