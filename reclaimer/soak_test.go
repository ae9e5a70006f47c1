package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/nodeapi"
	"github.com/gpureclaim/gpureclaim/internal/sim/cluster"
	"github.com/gpureclaim/gpureclaim/internal/testkit/amtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeslack"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// soakReclaims is how many reclaims TestSoak has in flight: 200 in `make
// test`; GPURECLAIM_SOAK_RECLAIMS=1000 (`make soak`) for the full run.
func soakReclaims(t *testing.T) int {
	n := 200
	if s := os.Getenv("GPURECLAIM_SOAK_RECLAIMS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err, "GPURECLAIM_SOAK_RECLAIMS")
	}
	return n
}

// fakeNode is a node's action endpoint for many units, one process each:
// it counts the kills it accepted and refuses a term of the Lease older
// than the newest it has seen, as the exporter does.
type fakeNode struct {
	mu      sync.Mutex
	killed  map[string]int
	refused []string
	newest  map[string]int64
}

func (n *fakeNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer node-token" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/api/v1/units/")
	uuid, kill := strings.CutSuffix(rest, "/kill")
	pid := 10000 + soakIndex(uuid)
	w.Header().Set("Content-Type", "application/json")
	n.mu.Lock()
	defer n.mu.Unlock()
	if !kill {
		u := nodeapi.Unit{UUID: uuid, Node: "soak-node"}
		if n.killed[uuid] == 0 {
			u.Processes = []nodeapi.Process{{PID: pid, StartTime: time.Unix(1772445600, 0).UTC(), User: soakUser(uuid)}}
		}
		_ = json.NewEncoder(w).Encode(u)
		return
	}
	var req nodeapi.KillRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if req.Lease != "" && req.Fence < n.newest[req.Lease] {
		n.refused = append(n.refused, fmt.Sprintf("%s: term %d < %d", uuid, req.Fence, n.newest[req.Lease]))
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(nodeapi.KillResult{Error: "an older term"})
		return
	}
	n.newest[req.Lease] = max(n.newest[req.Lease], req.Fence)
	n.killed[uuid]++
	_ = json.NewEncoder(w).Encode(nodeapi.KillResult{Killed: []int{pid}})
}

func soakUUID(i int) string { return fmt.Sprintf("GPU-soak-%05d", i) }
func soakIndex(uuid string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(uuid, "GPU-soak-"))
	return i
}
func soakUser(uuid string) string      { return fmt.Sprintf("u%d", soakIndex(uuid)) }
func soakSlackUser(user string) string { return "U" + strings.ToUpper(user) }

// auditEntry is what TestSoak reads of the apiserver's audit log.
type auditEntry struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef struct {
		Resource string `json:"resource"`
		Name     string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// TestSoak runs two reclaimers on a real apiserver (the chart's roles and
// fence policy, an audit log) with hundreds of reclaims in flight, and
// takes the leader down again and again: SIGKILLed, as when its node is
// lost, or SIGSTOPped past its Lease and resumed, as after a long pause.
// At the end every unit was freed once (the node endpoint counts the
// kills it accepted, and refuses the older term of a kill a paused replica
// had on its way), every owner warned once on Slack (one
// post per warning) and told once; the webhook receiver got one warning
// and one final message per unit (by key: it delivers at least once); no
// replica wrote anything the apiserver accepted after it resumed from a
// pause, and none is stuck.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the reclaimer and runs kube-apiserver")
	}
	n := soakReclaims(t)
	dir := t.TempDir()
	reclaimerBin := tooltest.Build(t, dir, "./reclaimer", "gpureclaim-reclaimer")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node.token"), []byte("node-token\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "webhook.token"), []byte("am-token\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "slack.token"), []byte("xoxb-soak\n"), 0o600))

	node := &fakeNode{killed: map[string]int{}, newest: map[string]int64{}}
	nodeSrv := httptest.NewServer(node)
	t.Cleanup(nodeSrv.Close)
	slack := fakeslack.New(t)
	for i := range n {
		u := soakUser(soakUUID(i))
		slack.AddUser(u+"@example.com", soakSlackUser(u))
	}
	rcv := &receiver{keys: map[string]int{}}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)
	am := amtest.Start(t, amtest.Config("http://127.0.0.1:1/unused", "x", time.Hour))

	cl, kubeconfig := reclaimerCluster(t, cluster.Options{Audit: true})
	fence, err := deploy.ReclaimerFence(tooltest.Root(t))
	require.NoError(t, err)
	cl.Apply(t, fence)

	cfgPath := filepath.Join(dir, "soak.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`webhook: {bearer_token_file: webhook.token, max_body_bytes: 64MiB}
web: {auth: {none: true}}
alertmanager: {url: %q}
kubernetes: {enabled: true, kubeconfig: %q}
nodes: {addresses: {soak-node: %q}, authorization: {credentials_file: node.token}, timeout: 45s}
circuit_breaker: {max_pending: 0}
notifiers:
  - {type: webhook, url: %q}
  - type: slack
    slack: {token_file: slack.token, signing_secret_file: slack.token, api_url: %q, email_domain: example.com, max_requests_per_minute: 600000}
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 15s, min_runtime: 0s}]
`, am.URL, kubeconfig, nodeSrv.URL, hook.URL, slack.GetAPIURL())), 0o600))

	// Each incarnation of a replica has its own identity, so that the audit
	// log tells them apart (the reclaimer's user agent carries it).
	var (
		mu       sync.Mutex
		resumed  = map[string]time.Time{} // identity -> when it was resumed from a pause
		launched int
	)
	spawn := func(name string) *replica {
		mu.Lock()
		launched++
		id := fmt.Sprintf("%s-%d", name, launched)
		mu.Unlock()
		r := &replica{name: id, addr: tooltest.FreeAddr(t), log: filepath.Join(dir, id+".log")}
		r.cmd = exec.Command(reclaimerBin, "--config.file="+cfgPath, "--web.listen-address="+r.addr, "--step.interval=50ms",
			"--storage.backend=kubernetes", "--kubernetes.namespace="+deploy.Namespace, "--leader-elect",
			"--leader-elect.identity="+id, "--leader-elect.lease-duration="+testLease.String(),
			"--leader-elect.renew-deadline="+testRenew.String(), "--leader-elect.retry-period="+testRetry.String())
		f, err := os.Create(r.log)
		require.NoError(t, err)
		r.cmd.Stdout, r.cmd.Stderr = f, f
		require.NoError(t, r.cmd.Start())
		t.Cleanup(func() { _ = r.cmd.Process.Signal(syscall.SIGCONT); _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
		return r
	}
	svc := &service{}
	front := httptest.NewServer(svc)
	t.Cleanup(front.Close)
	pair := []*replica{spawn("soak-a"), spawn("soak-b")}
	svc.set(pair...)
	leader := func() *replica {
		var l *replica
		require.Eventually(t, func() bool {
			for _, r := range pair {
				if r.ready() {
					l = r
					return true
				}
			}
			return false
		}, 20*testLease, 20*time.Millisecond, "a replica leads: %s", readFile(pair[0].log))
		return l
	}

	// Alertmanager fires an alert per unit and sends them in one
	// notification, retried until it is answered 200.
	startsAt := time.Now().Add(-10 * time.Minute).Truncate(time.Second).UTC()
	var alerts []amtest.Alert
	var wire []map[string]any
	keys := make([]string, n)
	for i := range n {
		uuid := soakUUID(i)
		labels := map[string]string{"alertname": "GPUIdle", "audience": "reclaimer", "uuid": uuid, "gpu_uuid": uuid, "node": "soak-node",
			"kind": "gpu", "user": soakUser(uuid), "keep": "false", "action": "kill", "signal": "sm_active"}
		alerts = append(alerts, amtest.Alert{Labels: labels, StartsAt: startsAt})
		fp := model.Fingerprint(model.LabelsToSignature(labels)).String()
		keys[i] = fmt.Sprintf("%s-%d", fp, startsAt.Unix())
		wire = append(wire, map[string]any{"status": "firing", "labels": labels, "annotations": map[string]string{"summary": "idle"},
			"startsAt": startsAt, "endsAt": time.Time{}, "fingerprint": fp})
	}
	am.Push(t, alerts...)
	notification, err := json.Marshal(map[string]any{"version": "4", "status": "firing", "receiver": "gpureclaim", "groupKey": "{}:{}", "alerts": wire})
	require.NoError(t, err)
	leader()
	require.Eventually(t, func() bool { return post(strings.TrimPrefix(front.URL, "http://"), notification) == http.StatusOK },
		60*time.Second, 200*time.Millisecond)

	states := func(r *replica) map[string]int {
		list, ok := listed(r.addr, "?limit=5000")
		if !ok {
			return nil
		}
		out := map[string]int{}
		for _, rc := range list {
			s := string(rc.State)
			if s == "done" && rc.Final.Sent {
				s = "done, told"
			}
			out[s]++
		}
		return out
	}

	// Take the leader down, in turn killed and paused, while the reclaims
	// go through their warnings, graces and actions.
	const rounds = 6
	for round := range rounds {
		time.Sleep(3 * time.Second)
		l := leader()
		t.Logf("round %d: %s leads; %v", round, l.name, states(l))
		if round%2 == 0 {
			require.NoError(t, l.cmd.Process.Kill())
			require.Equal(t, "signal: killed", waitExit(t, l.cmd, 20*time.Second))
		} else {
			require.NoError(t, l.cmd.Process.Signal(syscall.SIGSTOP))
			time.Sleep(3 * testLease)
			mu.Lock()
			resumed[l.name] = time.Now()
			mu.Unlock()
			require.NoError(t, l.cmd.Process.Signal(syscall.SIGCONT))
			require.Eventually(t, func() bool { return strings.Contains(readFile(l.log), "stepped down: waiting for the next term") },
				30*time.Second, 50*time.Millisecond, "the resumed replica steps down: %s", readFile(l.log))
			require.Nil(t, l.cmd.ProcessState, "and runs on")
			// It would lead again later (TestFailover shows it); here a
			// new incarnation takes its place, so that the audit log tells
			// what a replica wrote after its pause from a later term's writes.
			require.NoError(t, l.cmd.Process.Kill())
			require.Equal(t, "signal: killed", waitExit(t, l.cmd, 20*time.Second))
		}
		// Its pod is replaced, as a follower.
		for i, r := range pair {
			if r == l {
				pair[i] = spawn(strings.TrimSuffix(l.name, l.name[strings.LastIndexByte(l.name, '-'):]))
			}
		}
		svc.set(pair...)
	}

	var last *replica
	require.Eventually(t, func() bool {
		last = leader()
		return states(last)["done, told"] == n
	}, 5*time.Minute, time.Second, "every reclaim done and told, none stuck")
	t.Logf("done: %v", states(last))
	time.Sleep(time.Second) // anything sent twice would have arrived

	node.mu.Lock()
	for i := range n {
		require.Equal(t, 1, node.killed[soakUUID(i)], "unit %d: killed once", i)
	}
	// A kill already on its way when its replica was paused reaches the node
	// after the next leader's: the node refuses its older term, as the
	// exporter does. None is carried out.
	t.Logf("kills refused for an older term of the Lease: %d %v", len(node.refused), node.refused)
	node.mu.Unlock()

	posts := map[string]int{}
	for _, p := range slack.Posts() {
		var md struct {
			Payload struct {
				Key string `json:"key"`
			} `json:"event_payload"`
		}
		_ = json.Unmarshal(p.Metadata, &md)
		posts[md.Payload.Key]++
	}
	resent := 0
	for i := range n {
		require.Equal(t, 1, posts[keys[i]+"/warning/0"], "unit %d: one Slack warning", i)
		require.Equal(t, 1, rcv.distinct(keys[i]+"/warning"), "unit %d: one webhook warning", i)
		require.Equal(t, 1, rcv.distinct(keys[i]+"/reclaimed"), "unit %d: one final message", i)
		resent += rcv.deliveries(keys[i]+"/") - 2
	}
	t.Logf("webhook messages delivered again with the same key (a replica stopped between sending and recording): %d of %d", resent, 2*n)

	// The audit log: nothing a replica wrote after it resumed from a pause
	// was accepted.
	f, err := os.Open(filepath.Join(cl.Dir, cluster.AuditLog))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	writes, afterResume := map[string]int{}, 0
	for sc.Scan() {
		var e auditEntry
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		if e.ObjectRef.Resource != "gpureclaims" && e.ObjectRef.Resource != "configmaps" {
			continue
		}
		id := e.UserAgent[strings.LastIndexByte(e.UserAgent, '(')+1:]
		id = strings.TrimSuffix(id, ")")
		if e.ResponseStatus.Code/100 == 2 {
			writes[id]++
		}
		if at, ok := resumed[id]; ok && !e.Received.Before(at) {
			afterResume++
			require.NotEqual(t, 2, e.ResponseStatus.Code/100, "%s wrote %s %s after it resumed, and the apiserver took it", id, e.Verb, e.ObjectRef.Name)
		}
	}
	require.NoError(t, sc.Err())
	t.Logf("accepted writes by replica: %v; writes attempted after a resume (all refused): %d", writes, afterResume)
}
