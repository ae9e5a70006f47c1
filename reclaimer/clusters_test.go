package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/testkit/amtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/promtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/rules"
)

// TestTwoClustersOneAlertmanager runs a fleet of two clusters, a and b, on
// the production binaries: in each a simulated node of the same name whose
// GPUs are held by the same users, alice busy in a and idle in b, bob the
// other way round; a Prometheus per cluster with the generated rules and
// external_labels {cluster: …}; one Alertmanager that sends every
// reclaimer alert to both reclaimers (a fleet's route, wrong on purpose);
// and a reclaimer per cluster that knows its cluster. Each frees only its
// own cluster's idle GPU: alice's in b, bob's in a. Neither asks its node
// about a unit the other cluster's alert named, and each counts the
// other's alerts as refused.
func TestTwoClustersOneAlertmanager(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs Prometheus and Alertmanager")
	}
	dir := t.TempDir()
	reclaimerBin := tooltest.Build(t, dir, "./reclaimer", "gpureclaim-reclaimer")
	exporterBin := tooltest.Build(t, dir, "./exporter/simulated", "gpureclaim-exporter-sim")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node.token"), []byte("node-token\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "webhook.token"), []byte("am-token\n"), 0o600))
	ruleText, err := rules.RenderFile(filepath.Join(tooltest.Root(t), "rules", "demo.yaml"))
	require.NoError(t, err)
	ruleFile := filepath.Join(dir, "rules.yml")
	require.NoError(t, os.WriteFile(ruleFile, ruleText, 0o644))

	type cluster struct {
		name, exporter, exporterLog string
		reclaimer                   *replica
		busy, idle                  string // the users whose GPU is busy, idle
		busyUUID, idleUUID          string
	}
	clusters := []*cluster{{name: "a", busy: "alice", idle: "bob"}, {name: "b", busy: "bob", idle: "alice"}}

	// The reclaimers' addresses first: Alertmanager sends to both.
	for _, c := range clusters {
		c.reclaimer = &replica{name: "reclaimer-" + c.name, addr: tooltest.FreeAddr(t), log: filepath.Join(dir, "reclaimer-"+c.name+".log")}
	}
	am := amtest.Start(t, fmt.Sprintf(`route:
  receiver: people
  routes:
    - matchers: ['audience="reclaimer"']
      receiver: fleet
      group_by: [cluster, alertname, uuid, user]
      group_wait: 0s
      group_interval: 1s
      repeat_interval: 1h
receivers:
  - name: people
  - name: fleet
    webhook_configs:
      - {url: "http://%s/webhook", send_resolved: true, max_alerts: 0, http_config: {authorization: {credentials: am-token}}}
      - {url: "http://%s/webhook", send_resolved: true, max_alerts: 0, http_config: {authorization: {credentials: am-token}}}
`, clusters[0].reclaimer.addr, clusters[1].reclaimer.addr))

	for _, c := range clusters {
		// The same node name, users and GPUs in both clusters.
		activity := map[string]float64{c.busy: 0.9, c.idle: 0}
		scenario := fmt.Sprintf("node: gpu-1\nsystem: dgxh100\nusers: {alice: 1000, bob: 1001}\ngpus:\n"+
			"  - {index: 0, sm_active: %g, processes: [{pid: 5000, user: alice, memory_used: 10GiB, started: -2h}]}\n"+
			"  - {index: 1, sm_active: %g, processes: [{pid: 5001, user: bob, memory_used: 10GiB, started: -2h}]}\n",
			activity["alice"], activity["bob"])
		scenarioFile := filepath.Join(dir, c.name+".yaml")
		require.NoError(t, os.WriteFile(scenarioFile, []byte(scenario), 0o644))
		c.exporter, c.exporterLog = tooltest.FreeAddr(t), filepath.Join(dir, "exporter-"+c.name+".log")
		log, err := os.Create(c.exporterLog)
		require.NoError(t, err)
		exporter := exec.Command(exporterBin, "--simulate="+scenarioFile, "--web.listen-address="+c.exporter,
			"--sample.interval=1s", "--action.token-file="+filepath.Join(dir, "node.token"), "--action.idle-window=2s", "--action.kill-grace=0s")
		exporter.Stdout, exporter.Stderr = log, log
		require.NoError(t, exporter.Start())
		t.Cleanup(func() { _ = exporter.Process.Kill(); _ = exporter.Wait() })
		require.Eventually(t, func() bool {
			alice, ok1 := nodeUnit(c.exporter, 0)
			bob, ok2 := nodeUnit(c.exporter, 1)
			if !ok1 || !ok2 {
				return false
			}
			units := map[string]string{"alice": alice.uuid, "bob": bob.uuid}
			c.busyUUID, c.idleUUID = units[c.busy], units[c.idle]
			return true
		}, 30*time.Second, 200*time.Millisecond)
		t.Logf("cluster %s: %s busy on %s, %s idle on %s", c.name, c.busy, c.busyUUID, c.idle, c.idleUUID)

		promtest.Start(t, fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s, external_labels: {%s: %s}}
rule_files: [%q]
alerting: {alertmanagers: [{static_configs: [{targets: [%q]}]}]}
scrape_configs:
  - {job_name: %q, static_configs: [{targets: [%q]}]}
`, names.LabelCluster, c.name, ruleFile, strings.TrimPrefix(am.URL, "http://"), names.ExporterJob, c.exporter))

		cfgPath := filepath.Join(dir, "reclaimer-"+c.name+".yml")
		require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`cluster: %s
webhook: {bearer_token_file: webhook.token}
web: {auth: {none: true}}
alertmanager: {url: %q}
kubernetes: {enabled: false}
nodes: {addresses: {gpu-1: "http://%s"}, authorization: {credentials_file: node.token}}
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 1s, min_runtime: 0s}]
`, c.name, am.URL, c.exporter)), 0o600))
		r := c.reclaimer
		r.cmd = exec.Command(reclaimerBin, "--config.file="+cfgPath, "--web.listen-address="+r.addr, "--step.interval=100ms",
			"--storage.path="+filepath.Join(dir, c.name+".db"))
		r.cmd.Dir = dir
		f, err := os.Create(r.log)
		require.NoError(t, err)
		r.cmd.Stdout, r.cmd.Stderr = f, f
		require.NoError(t, r.cmd.Start())
		t.Cleanup(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
		require.Eventually(t, r.ready, 20*time.Second, 50*time.Millisecond, "%s", readFile(r.log))
	}

	// Each cluster's idle GPU is freed by its own reclaimer.
	for _, c := range clusters {
		require.Eventually(t, func() bool {
			return strings.Contains(readFile(c.exporterLog), "uuid="+c.idleUUID+" processes=1")
		}, 3*time.Minute, 200*time.Millisecond, "cluster %s: %s's idle GPU is freed:\n%s\n%s", c.name, c.idle, readFile(c.exporterLog), readFile(c.reclaimer.log))
	}
	time.Sleep(3 * time.Second) // anything sent to the wrong node would have arrived
	for _, c := range clusters {
		// The reclaimer recorded, warned about and acted on its own
		// cluster's alert alone.
		rs, ok := listed(c.reclaimer.addr, "")
		require.True(t, ok)
		require.Len(t, rs, 1, "cluster %s: one reclaim", c.name)
		require.Equal(t, c.name, rs[0].Labels.Get(names.LabelCluster))
		require.Equal(t, c.idle, rs[0].Target.User)
		log := readFile(c.exporterLog)
		require.NotContains(t, log, "uuid="+c.busyUUID+" processes=", "cluster %s: %s's busy GPU is not touched", c.name, c.busy)
		require.NotContains(t, log, "refused to kill uuid="+c.busyUUID, "cluster %s: nor asked about", c.name)
	}
	for _, c := range clusters {
		require.Eventually(t, func() bool { return otherCluster(c.reclaimer.addr) > 0 },
			30*time.Second, 200*time.Millisecond, "cluster %s refuses the other cluster's alert: %s", c.name, readFile(c.reclaimer.log))
		require.Contains(t, readFile(c.reclaimer.log), "refused alerts of another cluster")
	}
}

// otherCluster reads how many alerts a reclaimer refused as another cluster's.
func otherCluster(addr string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, `gpureclaim_reclaimer_decisions_total{decision="other_cluster"}`) {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v
		}
	}
	return 0
}
