// Package promtest runs a real Prometheus (bin/prometheus, built by `make
// tools`) on loopback for the tests.
package promtest

import (
	"os"
	"path/filepath"
	"testing"

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
	s := tooltest.Serve(t, "prometheus", "/-/ready", func(addr, dir string) []string {
		cfg := filepath.Join(dir, "prometheus.yml")
		if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr, "--log.level=warn"}
	})
	return &Prometheus{URL: s.URL, dir: s.Dir}
}

// Log returns Prometheus's log.
func (p *Prometheus) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
	return string(b)
}
