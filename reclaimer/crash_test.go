package main

import (
	"bytes"
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

	"github.com/gpureclaim/gpureclaim/internal/testkit/amtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notify"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// receiver counts the notifier's messages by idempotency key.
type receiver struct {
	mu   sync.Mutex
	keys map[string]int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var p notify.Payload
	if json.NewDecoder(req.Body).Decode(&p) == nil {
		r.mu.Lock()
		r.keys[p.IdempotencyKey]++
		r.mu.Unlock()
	}
}

// distinct counts the different messages whose key starts with prefix.
// deliveries counts the messages received whose key has prefix, repeats included.
func (r *receiver) deliveries(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, c := range r.keys {
		if strings.HasPrefix(k, prefix) {
			n += c
		}
	}
	return n
}

func (r *receiver) distinct(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k := range r.keys {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// lifecyclePoints are the engine's failpoints, in the order a reclaim
// passes them: the crash and failover tests stop the reclaimer at each.
var lifecyclePoints = []string{"ingested", "before-warning", "after-warning", "before-action", "after-action", "before-final"}

// idleNode runs one simulated node with n GPUs, each held by an idle
// bare-metal process of its own user (u0, u1, ...), with its action
// endpoint (token node-token), and writes the webhook's token (am-token)
// into dir. It returns the node's address once the node vouches for every
// unit's idleness, and the units' UUIDs.
func idleNode(t *testing.T, dir, exporterBin string, n int) (string, []string) {
	return idleNodeNamed(t, dir, exporterBin, "crash-node", "exporter.log", n)
}

// idleNodeNamed is idleNode for a node of another name, logging into logName.
func idleNodeNamed(t *testing.T, dir, exporterBin, node, logName string, n int) (string, []string) {
	scenario := "node: " + node + "\nsystem: dgxh100\nusers: {"
	for i := range n {
		scenario += fmt.Sprintf("u%d: %d, ", i, 1000+i)
	}
	scenario = strings.TrimSuffix(scenario, ", ") + "}\ngpus:\n"
	for i := range n {
		scenario += fmt.Sprintf("  - {index: %d, sm_active: 0, processes: [{pid: %d, user: u%d, memory_used: 10GiB, started: -2h}]}\n", i, 5000+i, i)
	}
	scenarioFile := filepath.Join(dir, node+".yaml")
	require.NoError(t, os.WriteFile(scenarioFile, []byte(scenario), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node.token"), []byte("node-token\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "webhook.token"), []byte("am-token\n"), 0o600))
	addr := tooltest.FreeAddr(t)
	log, err := os.Create(filepath.Join(dir, logName))
	require.NoError(t, err)
	exporter := exec.Command(exporterBin, "--simulate="+scenarioFile, "--web.listen-address="+addr,
		"--sample.interval=1s", "--action.token-file="+filepath.Join(dir, "node.token"), "--action.idle-window=2s", "--action.kill-grace=0s")
	exporter.Stdout, exporter.Stderr = log, log
	require.NoError(t, exporter.Start())
	t.Cleanup(func() { _ = exporter.Process.Kill(); _ = exporter.Wait() })
	uuids := make([]string, n)
	require.Eventually(t, func() bool {
		for i := range n {
			u, ok := nodeUnit(addr, i)
			if !ok || !u.idle {
				return false
			}
			uuids[i] = u.uuid
		}
		return true
	}, 30*time.Second, 200*time.Millisecond)
	return addr, uuids
}

// TestCrashAtEveryStep kills the reclaimer (SIGKILL, as a power cut) at
// each step of a reclaim, restarts it, and checks that the processes were
// signalled exactly once, the owner warned, and nothing lost.
func TestCrashAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	points := lifecyclePoints
	dir := t.TempDir()
	reclaimerBin := tooltest.Build(t, dir, "./reclaimer", "gpureclaim-reclaimer")
	exporterBin := tooltest.Build(t, dir, "./exporter/simulated", "gpureclaim-exporter-sim")

	exporterAddr, uuids := idleNode(t, dir, exporterBin, len(points))
	am := amtest.Start(t, amtest.Config("http://127.0.0.1:1/unused", "x", time.Hour))
	rcv := &receiver{keys: map[string]int{}}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)

	for i, point := range points {
		t.Run(point, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state.db")
			cfgPath := filepath.Join(dir, fmt.Sprintf("reclaimer-%d.yml", i))
			require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`webhook: {bearer_token_file: webhook.token}
web: {auth: {none: true}}
alertmanager: {url: %q}
kubernetes: {enabled: false}
nodes: {addresses: {crash-node: "http://%s"}, authorization: {credentials_file: node.token}, timeout: 45s}
notifiers: [{type: webhook, url: %q}]
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 1s, min_runtime: 0s}]
`, am.URL, exporterAddr, hook.URL)), 0o600))
			addr := tooltest.FreeAddr(t)
			start := func(failpoint string) *exec.Cmd {
				cmd := exec.Command(reclaimerBin, "--config.file="+cfgPath, "--storage.path="+state, "--web.listen-address="+addr, "--step.interval=50ms")
				cmd.Env = append(os.Environ(), "GPURECLAIM_FAILPOINT="+failpoint)
				log, _ := os.Create(filepath.Join(filepath.Dir(state), "reclaimer.log"))
				cmd.Stdout, cmd.Stderr = log, log
				require.NoError(t, cmd.Start())
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				require.Eventually(t, func() bool {
					// Ready, not only listening: until it leads, a replica
					// answers the webhook 503.
					resp, err := http.Get("http://" + addr + "/readyz")
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == http.StatusOK
				}, 10*time.Second, 20*time.Millisecond)
				return cmd
			}

			labels := map[string]string{"alertname": "GPUIdle", "audience": "reclaimer", "uuid": uuids[i], "gpu_uuid": uuids[i], "node": "crash-node",
				"kind": "gpu", "user": fmt.Sprintf("u%d", i), "keep": "false", "action": "kill", "signal": "sm_active"}
			startsAt := time.Now().Add(-10 * time.Minute).Truncate(time.Second).UTC()
			am.Push(t, amtest.Alert{Labels: labels, StartsAt: startsAt})
			notification := notificationFor(labels, startsAt)

			cmd := start(point)
			post(addr, notification) // may die with the process at "ingested"
			state1 := waitExit(t, cmd, 20*time.Second)
			require.Equal(t, "signal: killed", state1, "the reclaimer died at %s", point)

			cmd = start("")
			// Alertmanager retries what was not acknowledged, and repeats.
			require.Equal(t, http.StatusOK, post(addr, notification))
			require.Eventually(t, func() bool {
				rs := reclaims(addr)
				return len(rs) == 1 && rs[0].State == "done" && rs[0].Final
			}, 30*time.Second, 50*time.Millisecond, "the reclaim finishes after the restart: %v\n%s", reclaims(addr), readFile(filepath.Join(filepath.Dir(state), "reclaimer.log")))

			log, err := os.ReadFile(filepath.Join(dir, "exporter.log"))
			require.NoError(t, err)
			require.Equal(t, 1, strings.Count(string(log), "uuid="+uuids[i]+" processes=1"), "the node signalled the processes exactly once")
			require.Equal(t, 1, rcv.distinct(model.Fingerprint(model.LabelsToSignature(labels)).String()+fmt.Sprintf("-%d/warning", startsAt.Unix())), "one warning (delivered at least once)")
			require.Equal(t, 1, rcv.distinct(model.Fingerprint(model.LabelsToSignature(labels)).String()+fmt.Sprintf("-%d/reclaimed", startsAt.Unix())), "the owner is told once it is done")
			_ = cmd.Process.Signal(syscall.SIGTERM)
		})
	}
}

type unitView struct {
	uuid string
	idle bool
}

func nodeUnit(addr string, gpu int) (unitView, bool) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return unitView{}, false
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "gpureclaim_unit_info{") && strings.Contains(line, fmt.Sprintf(`gpu_index="%d"`, gpu)) {
			i := strings.Index(line, `,uuid="`)
			uuid := line[i+7 : i+7+strings.Index(line[i+7:], `"`)]
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/units/"+uuid, nil)
			req.Header.Set("Authorization", "Bearer node-token")
			r2, err := http.DefaultClient.Do(req)
			if err != nil {
				return unitView{}, false
			}
			defer r2.Body.Close()
			var u struct {
				Idleness struct{ Idle bool } `json:"idleness"`
			}
			_ = json.NewDecoder(r2.Body).Decode(&u)
			return unitView{uuid: uuid, idle: u.Idleness.Idle}, true
		}
	}
	return unitView{}, false
}

func notificationFor(labels map[string]string, startsAt time.Time) []byte {
	b, _ := json.Marshal(map[string]any{
		"version": "4", "status": "firing", "receiver": "gpureclaim", "groupKey": "{}:{}",
		"alerts": []map[string]any{{"status": "firing", "labels": labels, "annotations": map[string]string{"summary": "idle"},
			"startsAt": startsAt, "endsAt": time.Time{}, "fingerprint": model.Fingerprint(model.LabelsToSignature(labels)).String()}},
	})
	return b
}

func post(addr string, body []byte) int {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhook", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer am-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

type reclaimState struct {
	State string
	Final bool
}

func reclaims(addr string) []reclaimState {
	list, _ := listed(addr, "")
	var out []reclaimState
	for _, r := range list {
		out = append(out, reclaimState{string(r.State), r.Final.Sent})
	}
	return out
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func waitExit(t *testing.T, cmd *exec.Cmd, d time.Duration) string {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			return "exit 0"
		}
		return err.Error()
	case <-time.After(d):
		t.Fatalf("the reclaimer did not reach its failpoint")
		return ""
	}
}

// TestCrashAfterTheJournal kills the reclaimer on bbolt (SIGKILL) once a
// notification of 5,000 alerts is in its journal and before its reclaims
// are all written: the next start decides them from the journal, with no
// retry from Alertmanager, and the retry that comes is a duplicate.
func TestCrashAfterTheJournal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the reclaimer")
	}
	dir := t.TempDir()
	bin := tooltest.Build(t, dir, "./reclaimer", "gpureclaim-reclaimer")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "webhook.token"), []byte("am-token\n"), 0o600))
	cfg := filepath.Join(dir, "reclaimer.yml")
	// answer_within 1ms: 5,000 reclaims take longer to write, so the
	// notification goes into the journal.
	require.NoError(t, os.WriteFile(cfg, []byte(`webhook: {bearer_token_file: webhook.token, answer_within: 1ms}
web: {auth: {none: true}}
alertmanager: {url: "http://127.0.0.1:1"}
kubernetes: {enabled: false}
circuit_breaker: {max_pending: 0}
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: notify}]
`), 0o600))
	state := filepath.Join(dir, "state.db")
	addr := tooltest.FreeAddr(t)
	start := func(failpoint string) *exec.Cmd {
		cmd := exec.Command(bin, "--config.file="+cfg, "--storage.path="+state, "--web.listen-address="+addr)
		cmd.Env = append(os.Environ(), "GPURECLAIM_FAILPOINT="+failpoint)
		log, err := os.OpenFile(filepath.Join(dir, "reclaimer.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		require.NoError(t, err)
		cmd.Stdout, cmd.Stderr = log, log
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		require.Eventually(t, func() bool { return (&replica{addr: addr}).ready() }, 10*time.Second, 20*time.Millisecond)
		return cmd
	}
	notification := reclaimtest.Notification(t, 5000, time.Now().Add(-time.Hour).UTC().Truncate(time.Second))

	cmd := start("journaled")
	require.Zero(t, post(addr, notification), "killed before it answered")
	require.Equal(t, "signal: killed", waitExit(t, cmd, 20*time.Second))

	start("")
	require.Eventually(t, func() bool {
		rs, ok := listed(addr, "?limit=5000")
		return ok && len(rs) == 5000 && unwritten(addr) == 0
	}, 30*time.Second, 100*time.Millisecond, "decided from the journal: %s", readFile(filepath.Join(dir, "reclaimer.log")))
	require.Contains(t, readFile(filepath.Join(dir, "reclaimer.log")), "replayed a notification from the journal")

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhook", bytes.NewReader(notification))
	req.Header.Set("Authorization", "Bearer am-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var res lifecycle.IngestResult
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, lifecycle.IngestResult{Duplicate: 5000}, res, "Alertmanager's retry changes nothing")
}
