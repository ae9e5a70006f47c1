package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/sim/cluster"
	"github.com/gpureclaim/gpureclaim/internal/testkit/amtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// The Lease's timings in the failover test: short, so that a takeover
// takes seconds.
const (
	testLease = 2 * time.Second
	testRenew = 1500 * time.Millisecond
	testRetry = 200 * time.Millisecond
)

// replica is one reclaimer process of a highly available pair.
type replica struct {
	name, addr string
	cmd        *exec.Cmd
	log        string
}

func (r *replica) ready() bool {
	resp, err := http.Get("http://" + r.addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// service stands for the reclaimer's Kubernetes Service: it sends each
// request to a ready replica, and answers 503 when none is (Alertmanager
// then retries).
type service struct {
	mu       sync.Mutex
	replicas []*replica
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	rs := append([]*replica(nil), s.replicas...)
	s.mu.Unlock()
	for _, rep := range rs {
		if rep.ready() {
			u, _ := url.Parse("http://" + rep.addr)
			httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
			return
		}
	}
	http.Error(w, "no ready endpoint", http.StatusServiceUnavailable)
}

func (s *service) set(rs ...*replica) {
	s.mu.Lock()
	s.replicas = rs
	s.mu.Unlock()
}

// TestFailover runs two reclaimers that share their state in GPUReclaim
// resources on a real apiserver and elect a leader on a Lease, with the
// reclaimer's own roles. At each step of a reclaim the leader is
// SIGKILLed, as when its node is lost: the other takes over within the
// lease, resumes the reclaim, and the node's processes are signalled once,
// the owner warned once and told once. A snooze (a silence on the
// reclaimer's copy of the alert) in force before a failover holds after it,
// and kubectl lists the pending reclaims.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs kube-apiserver")
	}
	points := lifecyclePoints
	dir := t.TempDir()
	reclaimerBin := tooltest.Build(t, dir, "./reclaimer", "gpureclaim-reclaimer")
	exporterBin := tooltest.Build(t, dir, "./exporter/simulated", "gpureclaim-exporter-sim")

	cases := len(points) + 1
	exporterAddr, uuids := idleNode(t, dir, exporterBin, cases)
	// A second node, for the paused leader's reclaims.
	const pausedUnits = 6
	pauseAddr, pauseUUIDs := idleNodeNamed(t, dir, exporterBin, "pause-node", "pause-node.log", pausedUnits)
	am := amtest.Start(t, amtest.Config("http://127.0.0.1:1/unused", "x", time.Hour))
	rcv := &receiver{keys: map[string]int{}}
	hook := httptest.NewServer(rcv)
	t.Cleanup(hook.Close)

	cl, kubeconfig := reclaimerCluster(t, cluster.Options{})

	svc := &service{}
	front := httptest.NewServer(svc)
	t.Cleanup(front.Close)

	// pair starts two replicas on one Lease with the given grace; the first
	// stops at failpoint.
	pair := func(t *testing.T, lease, grace, failpoint string) (*replica, *replica) {
		cfgPath := filepath.Join(dir, lease+".yml")
		require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`webhook: {bearer_token_file: webhook.token}
web: {auth: {none: true}}
alertmanager: {url: %q}
kubernetes: {enabled: true, kubeconfig: %q}
nodes: {addresses: {crash-node: "http://%s", pause-node: "http://%s"}, authorization: {credentials_file: node.token}, timeout: 45s}
notifiers: [{type: webhook, url: %q}]
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: %s, min_runtime: 0s}]
`, am.URL, kubeconfig, exporterAddr, pauseAddr, hook.URL, grace)), 0o600))
		start := func(name, failpoint string) *replica {
			r := &replica{name: name, addr: tooltest.FreeAddr(t), log: filepath.Join(dir, name+".log")}
			r.cmd = exec.Command(reclaimerBin, "--config.file="+cfgPath, "--web.listen-address="+r.addr, "--step.interval=50ms",
				"--storage.backend=kubernetes", "--kubernetes.namespace="+deploy.Namespace, "--leader-elect", "--leader-elect.lease-name="+lease,
				"--leader-elect.identity="+name, "--leader-elect.lease-duration="+testLease.String(),
				"--leader-elect.renew-deadline="+testRenew.String(), "--leader-elect.retry-period="+testRetry.String())
			r.cmd.Env = append(os.Environ(), "GPURECLAIM_FAILPOINT="+failpoint)
			f, _ := os.Create(r.log)
			r.cmd.Stdout, r.cmd.Stderr = f, f
			require.NoError(t, r.cmd.Start())
			t.Cleanup(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
			return r
		}
		a := start(lease+"-a", failpoint)
		require.Eventually(t, a.ready, 20*time.Second, 20*time.Millisecond, "the first replica leads: %s", readFile(a.log))
		b := start(lease+"-b", "")
		time.Sleep(3 * testRetry)
		require.False(t, b.ready(), "the second waits, not ready")
		svc.set(a, b)
		return a, b
	}
	alertOn := func(node, uuid string, i int) (map[string]string, time.Time, []byte) {
		labels := map[string]string{"alertname": "GPUIdle", "audience": "reclaimer", "uuid": uuid, "gpu_uuid": uuid, "node": node,
			"kind": "gpu", "user": fmt.Sprintf("u%d", i), "keep": "false", "action": "kill", "signal": "sm_active"}
		startsAt := time.Now().Add(-10 * time.Minute).Truncate(time.Second).UTC()
		am.Push(t, amtest.Alert{Labels: labels, StartsAt: startsAt})
		return labels, startsAt, notificationFor(labels, startsAt)
	}
	alert := func(i int) (map[string]string, time.Time, []byte) { return alertOn("crash-node", uuids[i], i) }
	// Alertmanager retries until the Service answers 200.
	deliver := func(body []byte) {
		require.Eventually(t, func() bool { return post(strings.TrimPrefix(front.URL, "http://"), body) == http.StatusOK }, 30*time.Second, 100*time.Millisecond)
	}

	for i, point := range points {
		t.Run(point, func(t *testing.T) {
			a, b := pair(t, fmt.Sprintf("failover-%d", i), "1s", point)
			labels, startsAt, notification := alert(i)
			post(a.addr, notification) // may die with the leader at "ingested"
			require.Equal(t, "signal: killed", waitExit(t, a.cmd, 20*time.Second), "the leader died at %s", point)
			died := time.Now()

			require.Eventually(t, b.ready, 10*testLease, 20*time.Millisecond, "the other replica takes over: %s", readFile(b.log))
			took := time.Since(died)
			t.Logf("%s: took over %s after the leader died (lease %s)", point, took.Round(10*time.Millisecond), testLease)
			// Within a lease of the leader's last renewal; twice that
			// allows for a loaded machine.
			require.Less(t, took, 2*testLease, "took over within the lease")
			deliver(notification)
			require.Eventually(t, func() bool {
				r, ok := reclaimOfUnit(b.addr, uuids[i])
				return ok && r.State == "done" && r.Final.Sent
			}, 30*time.Second, 50*time.Millisecond, "the reclaim finishes on the new leader:\n%s", readFile(b.log))

			log, err := os.ReadFile(filepath.Join(dir, "exporter.log"))
			require.NoError(t, err)
			require.Equal(t, 1, strings.Count(string(log), "uuid="+uuids[i]+" processes=1"), "the node signalled the processes exactly once")
			key := model.Fingerprint(model.LabelsToSignature(labels)).String() + fmt.Sprintf("-%d", startsAt.Unix())
			require.Equal(t, 1, rcv.distinct(key+"/warning"), "one warning (delivered at least once)")
			require.Equal(t, 1, rcv.distinct(key+"/reclaimed"), "the owner is told once it is done")
			_ = b.cmd.Process.Signal(syscall.SIGTERM)
		})
	}

	t.Run("a snooze holds across a failover", func(t *testing.T) {
		i := len(points)
		a, b := pair(t, "failover-snooze", "3s", "")
		labels, _, notification := alert(i)
		deliver(notification)
		require.Eventually(t, func() bool { _, ok := reclaimOfUnit(a.addr, uuids[i]); return ok }, 10*time.Second, 50*time.Millisecond)
		// The owner snoozes: a silence on the reclaimer's copy, which the
		// leader finds when it checks before acting.
		am.Silence(t, labels, time.Now().Add(time.Hour))
		require.Eventually(t, func() bool { r, _ := reclaimOfUnit(a.addr, uuids[i]); return r.State == "snoozed" }, 20*time.Second, 50*time.Millisecond, "%s", readFile(a.log))

		out, err := exec.Command(tooltest.Bin(t, "kubectl"), "--kubeconfig", cl.Kubeconfig, "get", "gpureclaims", "-n", deploy.Namespace, "--field-selector", "status.state=snoozed").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "u"+fmt.Sprint(i), "kubectl lists the snoozed reclaim and its owner")

		require.NoError(t, a.cmd.Process.Kill())
		_ = a.cmd.Wait()
		require.Eventually(t, b.ready, 10*testLease, 20*time.Millisecond)
		time.Sleep(3 * time.Second) // past the grace, several steps
		r, ok := reclaimOfUnit(b.addr, uuids[i])
		require.True(t, ok)
		require.Equal(t, reclaim.Snoozed, r.State, "the snooze holds on the new leader")
		log, err := os.ReadFile(filepath.Join(dir, "exporter.log"))
		require.NoError(t, err)
		require.Zero(t, strings.Count(string(log), "uuid="+uuids[i]+" processes=1"), "nothing was done")
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
	})

	// The leader is paused (SIGSTOP: a long GC, a frozen VM) in the middle
	// of an action, past its Lease; the other takes over, finishes that
	// action and the other reclaims. When the first resumes, right where it
	// stopped, with the rest of its work due in its memory, it does nothing:
	// it has not renewed the Lease for longer than the renew deadline, so it
	// acts, writes and sends nothing, and steps down without renewing. It
	// does not exit (a container that exits at each pause loops in
	// CrashLoopBackOff): it waits, and leads again, under a new fencing
	// token and from the store, once the other stops.
	t.Run("a leader paused past its Lease does nothing when it resumes", func(t *testing.T) {
		a, b := pair(t, "failover-pause", "2s", "pause:before-action")
		type sent struct {
			uuid string
			key  string
		}
		var units []sent
		for i, uuid := range pauseUUIDs {
			labels, startsAt, notification := alertOn("pause-node", uuid, i)
			deliver(notification)
			units = append(units, sent{uuid, model.Fingerprint(model.LabelsToSignature(labels)).String() + fmt.Sprintf("-%d", startsAt.Unix())})
		}
		require.Eventually(t, func() bool { return stopped(a.cmd.Process.Pid) }, 20*time.Second, 20*time.Millisecond,
			"the leader pauses as it is about to act: %s", readFile(a.log))
		t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })

		require.Eventually(t, b.ready, 10*testLease, 20*time.Millisecond, "the other takes over: %s", readFile(b.log))
		require.Eventually(t, func() bool {
			for _, u := range units {
				if r, ok := reclaimOfUnit(b.addr, u.uuid); !ok || r.State != "done" || !r.Final.Sent {
					return false
				}
			}
			return true
		}, 30*time.Second, 50*time.Millisecond, "the new leader reclaims them: %s", readFile(b.log))

		require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
		require.Eventually(t, func() bool { return strings.Contains(readFile(a.log), "stepped down: waiting for the next term") },
			20*time.Second, 20*time.Millisecond, "the resumed replica steps down: %s", readFile(a.log))
		time.Sleep(time.Second) // anything it still sent would have arrived
		require.Nil(t, a.cmd.ProcessState, "it runs on")
		require.False(t, a.ready(), "and waits, not ready")
		require.True(t, b.ready(), "the other still leads: it was not made to wait a lease longer")

		// The other stops: the first leads the next term, from the store.
		require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, "exit 0", waitExit(t, b.cmd, 20*time.Second))
		require.Eventually(t, a.ready, 10*testLease, 20*time.Millisecond, "the resumed replica leads again: %s", readFile(a.log))
		require.Equal(t, 2, strings.Count(readFile(a.log), "took the lease: acting"), "two terms in one process")
		for _, u := range units {
			r, ok := reclaimOfUnit(a.addr, u.uuid)
			require.True(t, ok)
			require.Equal(t, reclaim.Done, r.State, "it knows what the other did")
		}
		time.Sleep(time.Second) // several steps of its new term

		log := readFile(filepath.Join(dir, "pause-node.log"))
		for _, u := range units {
			require.Equal(t, 1, strings.Count(log, "uuid="+u.uuid+" processes=1"), "signalled once")
			require.NotContains(t, log, "refused to kill uuid="+u.uuid, "and never asked again")
			require.Equal(t, 1, rcv.deliveries(u.key+"/warning"), "one warning, sent once")
			require.Equal(t, 1, rcv.deliveries(u.key+"/reclaimed"), "one final message, sent once")
		}
		require.Contains(t, readFile(a.log), "refused: leadership in doubt", "it was about to act, and did not")
	})
}

// reclaimerCluster runs kube-apiserver with the GPUReclaim CRD and the
// reclaimer's roles as the chart ships them, and returns a kubeconfig that
// authenticates as the reclaimer.
func reclaimerCluster(t *testing.T, o cluster.Options) (*kubetest.Cluster, string) {
	t.Helper()
	cl := kubetest.StartWith(t, o)
	root := tooltest.Root(t)
	cl.InstallCRDs(t, deploy.CRDs(root))
	clusterRole, err := deploy.ReclaimerClusterRole(root)
	require.NoError(t, err)
	cl.BindReclaimerRole(t, clusterRole)
	role, err := deploy.ReclaimerRole(root)
	require.NoError(t, err)
	cl.BindReclaimerNamespaceRole(t, role)
	kubeconfig, err := cl.KubeconfigFor(kubetest.ReclaimerToken)
	require.NoError(t, err)
	return cl, kubeconfig
}

// stopped says whether a process is stopped by a signal (state T in /proc).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, so read after its ")".
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && fields[0] == "T"
}

// listed is what a replica's API lists, read back from the public type.
func listed(addr, query string) ([]*reclaim.Reclaim, bool) {
	resp, err := http.Get("http://" + addr + "/api/v1/reclaims" + query)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var list v1alpha1.GPUReclaimList
	if json.NewDecoder(resp.Body).Decode(&list) != nil {
		return nil, false
	}
	var out []*reclaim.Reclaim
	for i := range list.Items {
		r, _, err := reclaim.FromAPI(&list.Items[i])
		if err != nil {
			return nil, false
		}
		out = append(out, r)
	}
	return out, true
}

// reclaimOfUnit is the reclaim of a unit, as a replica's API lists it.
func reclaimOfUnit(addr, uuid string) (*reclaim.Reclaim, bool) {
	rs, _ := listed(addr, "")
	for _, r := range rs {
		if r.Target.UUID == uuid {
			return r, true
		}
	}
	return &reclaim.Reclaim{}, false
}
