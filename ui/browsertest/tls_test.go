package browsertest

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// spki is the base64 SHA-256 of the public key of the PEM certificate in
// file, as Chromium's --ignore-certificate-errors-spki-list takes it.
func spki(t *testing.T, file string) string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(raw)
	if blk == nil {
		t.Fatalf("%s: no PEM block", file)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// TestConsoleOverTLS: the console of a cluster served over https (member
// certificates of `metastore certs`) draws the job view from the same
// origin without a console error. The browser accepts exactly the three
// members' keys (the CA is not installed in the system).
func TestConsoleOverTLS(t *testing.T) {
	chrome, msBin, jobBin := prepare(t)
	certs := filepath.Join(t.TempDir(), "certs")
	mustRun := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(msBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("metastore %v: %v\n%s", args, err, out)
		}
	}
	mustRun("certs", "ca", "--out", certs)
	var keys []string
	for i := 1; i <= 3; i++ {
		mustRun("certs", "member", "--ca-dir", certs, "--name", fmt.Sprintf("n%d", i), "--ip", "127.0.0.1", "--dns", "localhost")
		keys = append(keys, spki(t, filepath.Join(certs, fmt.Sprintf("n%d.crt", i))))
	}
	caFile := filepath.Join(certs, "ca.crt")
	pool := x509.NewCertPool()
	raw, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(raw) {
		t.Fatalf("CA %s: %v", caFile, err)
	}
	tlsClient = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(func() { tlsClient = nil })

	ms := startCluster(t, msBin, "https", func(id string) []string {
		return []string{"--tls-cert-file", filepath.Join(certs, id+".crt"), "--tls-key-file", filepath.Join(certs, id+".key"), "--tls-ca-file", caFile}
	})
	waitFor(t, 60*time.Second, "cluster with a leader", func() error {
		for _, m := range ms {
			var st struct {
				LeaderID string `json:"leader_id"`
			}
			if err := call("GET", m.url("/v1/status"), "", nil, &st); err != nil {
				return err
			}
			if st.LeaderID == "" {
				return fmt.Errorf("%s knows no leader", m.id)
			}
		}
		return nil
	})
	runJob(t, jobBin, ms, "", "--ca-file", caFile, "run", "--epochs", "5")
	var j apiJob
	if err := call("GET", ms[2].url("/v1/jobs/demo"), "", nil, &j); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, chrome, ms[2].url(""), chromedp.Flag("ignore-certificate-errors-spki-list", strings.Join(keys, ",")))
	b.open("/ui/jobs/demo")
	b.waitView("job view over https", `svg[data-chart="duration"]`)
	if got := eval[string](b, `location.protocol`); got != "https:" {
		t.Fatalf("the page is served over %s", got)
	}
	if f := b.fields(".card"); f["latest_completed"] != fmt.Sprint(j.LatestCompleted) || j.LatestCompleted != 5 {
		t.Errorf("job view over https: %v, API %+v", f, j)
	}
	b.screenshot("tls-job")
	b.noErrors("job view over https")
}
