package client

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTLSEndpoints: with Config.TLS a bare host:port is https, and the
// client verifies the server with the CA file LoadTLSConfig read.
func TestTLSEndpoints(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"n1","state":"leader","leader_id":"n1","members":[]}`))
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadTLSConfig(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	hostPort := strings.TrimPrefix(srv.URL, "https://")
	c, err := New(Config{Endpoints: []string{hostPort}, TLS: cfg, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints()[0]; got != srv.URL {
		t.Fatalf("endpoint %q, want %q", got, srv.URL)
	}
	st, err := c.Status(context.Background())
	if err != nil || st.ID != "n1" {
		t.Fatalf("status over https: %+v %v", st, err)
	}

	// Without the CA the server is not trusted.
	plain, _ := New(Config{Endpoints: []string{srv.URL}, MaxAttempts: 1})
	if _, err := plain.Status(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("status without the CA: %v", err)
	}
	if _, err := LoadTLSConfig(filepath.Join(t.TempDir(), "missing.crt"), "", ""); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	if _, err := LoadTLSConfig(caFile, "c.crt", ""); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
}
