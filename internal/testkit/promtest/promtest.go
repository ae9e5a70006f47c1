// Package promtest runs a real Prometheus (bin/prometheus, built by `make
// tools`) on loopback for the tests.
package promtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// Job is a scrape job of one target (an httptest server's URL).
type Job struct {
	Name, URL   string
	HonorLabels bool
}

// Scraping runs Prometheus evaluating rule files and scraping each job's
// target every second.
func Scraping(t testing.TB, rules []string, jobs ...Job) *Prometheus {
	t.Helper()
	var b strings.Builder
	b.WriteString("global: {scrape_interval: 1s, evaluation_interval: 1s}\n")
	fmt.Fprintf(&b, "rule_files: [%s]\n", strings.Join(quoted(rules), ", "))
	b.WriteString("scrape_configs:\n")
	for _, j := range jobs {
		fmt.Fprintf(&b, "  - {job_name: %q, honor_labels: %t, static_configs: [{targets: [%q]}]}\n", j.Name, j.HonorLabels, strings.TrimPrefix(j.URL, "http://"))
	}
	return Start(t, b.String())
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// Log returns Prometheus's log.
func (p *Prometheus) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
	return string(b)
}
