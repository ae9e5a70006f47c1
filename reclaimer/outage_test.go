package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/sim/cluster"
	"github.com/gpureclaim/gpureclaim/internal/testkit/amtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/notify"
)

// outage is how long the apiserver is down in TestAPIServerOutage.
const outage = 30 * time.Second

// TestAPIServerOutage stops the apiserver that holds the reclaimer's state
// for 30 s, at the moment the first owner's final message is delivered and
// while five other owners are in their grace. Meanwhile the reclaimer is not
// ready and answers a new notification 5xx; it sends no message twice (the
// one delivered as the store went away is not sent again once the store is
// back), acts on nothing it could not record, loses nothing, and when the
// apiserver is back every unit is freed once and every owner told once.
func TestAPIServerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs kube-apiserver")
	}
	const units = 7
	dir := t.TempDir()
	reclaimerBin := tooltest.Build(t, dir, "./reclaimer", "gpureclaim-reclaimer")
	exporterBin := tooltest.Build(t, dir, "./exporter/simulated", "gpureclaim-exporter-sim")
	nodeAddr, uuids := idleNodeNamed(t, dir, exporterBin, "outage-node", "outage-node.log", units)
	am := amtest.Start(t, amtest.Config("http://127.0.0.1:1/unused", "x", time.Hour))

	cl, kubeconfig := reclaimerCluster(t, cluster.Options{})

	// The notifier's receiver stops the apiserver as it takes the first
	// final message, before it answers: the reclaimer cannot record that
	// it was sent.
	rcv := &receiver{keys: map[string]int{}}
	down := make(chan time.Time, 1)
	var stop sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var p notify.Payload
		if json.NewDecoder(req.Body).Decode(&p) != nil {
			return
		}
		if strings.HasSuffix(p.IdempotencyKey, "/reclaimed") {
			stop.Do(func() { cl.StopAPIServer(); down <- time.Now() })
		}
		rcv.mu.Lock()
		rcv.keys[p.IdempotencyKey]++
		rcv.mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	cfgPath := filepath.Join(dir, "outage.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`webhook: {bearer_token_file: webhook.token}
web: {auth: {none: true}}
alertmanager: {url: %q}
kubernetes: {enabled: true, kubeconfig: %q}
nodes: {addresses: {outage-node: "http://%s"}, authorization: {credentials_file: node.token}, timeout: 45s}
notifiers: [{type: webhook, url: %q}]
policies:
  - {name: first, matchers: ['user="u0"'], action: auto, grace: 1s, min_runtime: 0s}
  - {name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 10s, min_runtime: 0s}
`, am.URL, kubeconfig, nodeAddr, hook.URL)), 0o600))
	rep := &replica{name: "outage", addr: tooltest.FreeAddr(t), log: filepath.Join(dir, "outage.log")}
	rep.cmd = exec.Command(reclaimerBin, "--config.file="+cfgPath, "--web.listen-address="+rep.addr, "--step.interval=50ms",
		"--storage.backend=kubernetes", "--kubernetes.namespace="+deploy.Namespace)
	logFile, err := os.Create(rep.log)
	require.NoError(t, err)
	rep.cmd.Stdout, rep.cmd.Stderr = logFile, logFile
	require.NoError(t, rep.cmd.Start())
	t.Cleanup(func() { _ = rep.cmd.Process.Kill(); _ = rep.cmd.Wait() })
	require.Eventually(t, rep.ready, 20*time.Second, 20*time.Millisecond, "%s", readFile(rep.log))

	keys := make([]string, units)
	notifications := make([][]byte, units)
	for i, uuid := range uuids {
		labels := map[string]string{"alertname": "GPUIdle", "audience": "reclaimer", "uuid": uuid, "gpu_uuid": uuid, "node": "outage-node",
			"kind": "gpu", "user": fmt.Sprintf("u%d", i), "keep": "false", "action": "kill", "signal": "sm_active"}
		startsAt := time.Now().Add(-10 * time.Minute).Truncate(time.Second).UTC()
		am.Push(t, amtest.Alert{Labels: labels, StartsAt: startsAt})
		keys[i] = model.Fingerprint(model.LabelsToSignature(labels)).String() + fmt.Sprintf("-%d", startsAt.Unix())
		notifications[i] = notificationFor(labels, startsAt)
	}
	// The last unit's alert first reaches the reclaimer during the outage.
	for i := range units - 1 {
		require.Equal(t, http.StatusOK, post(rep.addr, notifications[i]))
	}

	var wentDown time.Time
	select {
	case wentDown = <-down:
	case <-time.After(60 * time.Second):
		t.Fatalf("no final message reached the receiver: %s", readFile(rep.log))
	}
	require.Eventually(t, func() bool { return !rep.ready() }, 10*time.Second, 50*time.Millisecond, "not ready while the store is unreachable")
	require.NotEqual(t, http.StatusOK, post(rep.addr, notifications[units-1]), "a notification it cannot record is refused, to be retried")

	time.Sleep(time.Until(wentDown.Add(outage)))
	require.False(t, rep.ready(), "still not ready at the end of the outage")
	require.NoError(t, cl.StartAPIServer())
	require.Eventually(t, rep.ready, 30*time.Second, 50*time.Millisecond, "ready once the store answers: %s", readFile(rep.log))
	// Alertmanager retries the refused notification until it is answered 200.
	require.Eventually(t, func() bool { return post(rep.addr, notifications[units-1]) == http.StatusOK }, 60*time.Second, 500*time.Millisecond)

	require.Eventually(t, func() bool {
		for _, uuid := range uuids {
			if r, ok := reclaimOfUnit(rep.addr, uuid); !ok || r.State != "done" || !r.Final.Sent {
				return false
			}
		}
		return true
	}, 90*time.Second, 100*time.Millisecond, "every unit freed and its owner told: %s", readFile(rep.log))
	time.Sleep(2 * time.Second) // a repeat would have arrived

	node := readFile(filepath.Join(dir, "outage-node.log"))
	for i, uuid := range uuids {
		require.Equal(t, 1, strings.Count(node, "uuid="+uuid+" processes=1"), "unit %d signalled once", i)
		require.Equal(t, 1, rcv.deliveries(keys[i]+"/warning"), "unit %d: one warning, sent once", i)
		require.Equal(t, 1, rcv.deliveries(keys[i]+"/reclaimed"), "unit %d: one final message, sent once", i)
	}
	require.Contains(t, readFile(rep.log), "writing to the store failed", "the outage was seen")
	_ = rep.cmd.Process.Signal(syscall.SIGTERM)
}
