// Package amtest runs a real Alertmanager (bin/alertmanager, built by
// `make tools`) on loopback for the tests, routing every alert to a webhook.
package amtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// Alertmanager is a running Alertmanager.
type Alertmanager struct {
	URL    string
	served *tooltest.Served
	dir    string
}

// Config is the route: every alert with audience="reclaimer" goes to the
// webhook (with a bearer token), grouped per unit, re-sent after repeat.
func Config(webhookURL, token string, repeat time.Duration) string {
	return fmt.Sprintf(`route:
  receiver: people
  group_by: [alertname, uuid]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: %s
  routes:
    - matchers: ['audience="reclaimer"']
      receiver: gpureclaim
      group_by: [alertname, uuid]
      group_wait: 0s
      group_interval: 1s
      repeat_interval: %s
receivers:
  - name: people
  - name: gpureclaim
    webhook_configs:
      - url: %q
        send_resolved: true
        max_alerts: 0
        http_config:
          authorization: {credentials: %q}
`, repeat, repeat, webhookURL, token)
}

// Start runs Alertmanager with a config (see Config).
func Start(t testing.TB, config string) *Alertmanager {
	t.Helper()
	s := tooltest.Serve(t, "alertmanager", "/-/ready", func(addr, dir string) []string {
		cfg := filepath.Join(dir, "alertmanager.yml")
		if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"--config.file=" + cfg, "--storage.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr,
			"--cluster.listen-address=", "--log.level=debug"}
	})
	return &Alertmanager{URL: s.URL, served: s, dir: s.Dir}
}

// Stop stops it.
func (a *Alertmanager) Stop() { a.served.Stop() }

// Log returns Alertmanager's log.
func (a *Alertmanager) Log() string {
	b, _ := os.ReadFile(filepath.Join(a.dir, "alertmanager.log"))
	return string(b)
}

// Alert is an alert to push, as Prometheus would.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations,omitempty"`
	StartsAt    time.Time         `json:"startsAt,omitzero"`
	EndsAt      time.Time         `json:"endsAt,omitzero"`
}

// Push sends alerts through the API, as Prometheus does.
func (a *Alertmanager) Push(t testing.TB, alerts ...Alert) {
	t.Helper()
	b, _ := json.Marshal(alerts)
	resp, err := http.Post(a.URL+"/api/v2/alerts", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pushing alerts: %s", resp.Status)
	}
}

// Silence mutes the alerts whose labels equal matchers until until, as a
// person (or a snooze) would; it returns the silence's id.
func (a *Alertmanager) Silence(t testing.TB, matchers map[string]string, until time.Time) string {
	t.Helper()
	type matcher struct {
		Name    string `json:"name"`
		Value   string `json:"value"`
		IsRegex bool   `json:"isRegex"`
		IsEqual bool   `json:"isEqual"`
	}
	var ms []matcher
	for k, v := range matchers {
		ms = append(ms, matcher{Name: k, Value: v, IsEqual: true})
	}
	b, _ := json.Marshal(map[string]any{"matchers": ms, "startsAt": time.Now().UTC(), "endsAt": until.UTC(), "createdBy": "test", "comment": "test silence"})
	resp, err := http.Post(a.URL+"/api/v2/silences", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("creating a silence: %s", resp.Status)
	}
	return out.SilenceID
}
