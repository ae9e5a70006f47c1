// Package tlstest is a private certificate authority for tests: it issues
// server certificates for loopback and client certificates as PEM files,
// and serves HTTPS with them, with or without asking for a client's.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
)

// CA is a certificate authority no system trusts.
type CA struct {
	// CAFile is its certificate, PEM.
	CAFile string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	dir    string
	serial int64
}

// Pair is a certificate and its key, as PEM files.
type Pair struct {
	CertFile, KeyFile string
}

// NewCA makes a CA whose files live in the test's temporary folder.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca := &CA{dir: t.TempDir(), serial: 1}
	ca.key = newKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.CAFile = ca.write(t, "ca.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return ca
}

// Server issues a server certificate for 127.0.0.1 and the DNS names.
func (ca *CA) Server(t testing.TB, dnsNames ...string) Pair {
	t.Helper()
	return ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: dnsNames,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
}

// Client issues a client certificate for a name (its CommonName).
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	return ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// Pool holds the CA's certificate alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Serve serves h over HTTPS on loopback with a certificate of this CA.
// With mTLS it asks for a client certificate the CA issued and refuses a
// connection without one; r.TLS.PeerCertificates names the client.
func (ca *CA) Serve(t testing.TB, h http.Handler, mTLS bool) *httptest.Server {
	t.Helper()
	p := ca.Server(t)
	cert, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes the tests make
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if mTLS {
		srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
		srv.TLS.ClientCAs = ca.Pool()
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// Call is one request of a client under test, built from the HTTP client
// config it is given, to a server at url.
type Call func(t *testing.T, url string, hc promconfig.HTTPClientConfig) error

// Check runs the cases every outbound client must pass, against h served
// by a private CA: with the CA in tls_config the call succeeds; with a
// client certificate too it passes mutual TLS, and the server sees it;
// without the CA it fails as an unknown authority; without the client
// certificate the server refuses it.
func Check(t *testing.T, h http.Handler, call Call) {
	ca := NewCA(t, "gpureclaim test CA")
	client := ca.Client(t, "gpureclaim-reclaimer")
	var seen atomic.Value
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(ClientName(r))
		h.ServeHTTP(w, r)
	})
	withCA := promconfig.DefaultHTTPClientConfig
	withCA.TLSConfig = promconfig.TLSConfig{CAFile: ca.CAFile}
	withCert := withCA
	withCert.TLSConfig.CertFile, withCert.TLSConfig.KeyFile = client.CertFile, client.KeyFile

	t.Run("private CA", func(t *testing.T) {
		srv := ca.Serve(t, record, false)
		if err := call(t, srv.URL, withCA); err != nil {
			t.Fatalf("with tls_config.ca_file: %v", err)
		}
		err := call(t, srv.URL, promconfig.DefaultHTTPClientConfig)
		if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Fatalf("without the CA: %v, want a refused certificate", err)
		}
	})
	t.Run("mTLS", func(t *testing.T) {
		srv := ca.Serve(t, record, true)
		seen.Store("")
		if err := call(t, srv.URL, withCert); err != nil {
			t.Fatalf("with a client certificate: %v", err)
		}
		if got := seen.Load(); got != "gpureclaim-reclaimer" {
			t.Fatalf("the server saw client certificate %q, want gpureclaim-reclaimer", got)
		}
		if err := call(t, srv.URL, withCA); err == nil {
			t.Fatal("without a client certificate the call went through")
		}
	})
}

// ClientName is the CommonName of the client certificate a request came
// with, or "" without one.
func ClientName(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	return r.TLS.PeerCertificates[0].Subject.CommonName
}

func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate) Pair {
	t.Helper()
	ca.serial++
	tmpl.SerialNumber = big.NewInt(ca.serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	name := big.NewInt(ca.serial).String()
	return Pair{
		CertFile: ca.write(t, name+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		KeyFile:  ca.write(t, name+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})),
	}
}

func (ca *CA) write(t testing.TB, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
