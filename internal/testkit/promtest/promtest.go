// Package promtest runs a real Prometheus (bin/prometheus, built by `make
// tools`) on loopback for the tests.
package promtest

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// Prometheus is a running Prometheus.
type Prometheus struct {
	URL string
	dir string
}

// Start runs Prometheus with a config file's text; it is stopped when the
// test ends.
func Start(t testing.TB, config string) *Prometheus {
	t.Helper()
	bin := tooltest.Bin(t, "prometheus")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	log, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	p := &Prometheus{URL: "http://" + addr, dir: dir}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not start: %s", p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log returns Prometheus's log.
func (p *Prometheus) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
	return string(b)
}
