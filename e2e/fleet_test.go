package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/promscope"
	"github.com/gpureclaim/gpureclaim/internal/sim/stack"
	"github.com/gpureclaim/gpureclaim/internal/testkit/amtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/rules"
)

// fleetScenario is a node of one cluster of the fleet: the same node name,
// namespace and pod names in each cluster, with lab/nb's GPU at nbActivity
// and lab/train's at trainActivity.
func fleetScenario(nbActivity, trainActivity float64) string {
	return fmt.Sprintf(`node: gpu-1
system: dgxh100
pods:
  - {name: nb, namespace: lab, container: main}
  - {name: train, namespace: lab, container: main}
gpus:
  - {index: 0, sm_active: %g, pods: [nb], processes: [{pid: 4001, pod: nb, memory_used: 20GiB, started: -3h}]}
  - {index: 1, sm_active: %g, pods: [train], processes: [{pid: 4002, pod: train, memory_used: 40GiB, started: -3h}]}
`, nbActivity, trainActivity)
}

// TestFleetOfTwoClusters runs a fleet as docs/fleets.md describes it, on
// the production binaries: two Kubernetes control planes, a and b, each
// with a simulated GPU node whose pods have the same namespace and names
// (lab/nb busy in a and idle in b, lab/train the other way round), its
// exporter attributing GPUs from the cluster's pod list as the node binary
// does, its own Prometheus that labels what it scrapes with the cluster
// and writes it to one VictoriaMetrics; vmalert evaluating the rules over
// both clusters' series; one Alertmanager routing by cluster; one
// reclaimer per cluster that knows its cluster and reads the fleet's
// engine. Each frees only its own cluster's idle pod, every action is
// checked against the fleet's series of its cluster, the activity endpoint
// of each reclaimer reads its own cluster, and the fleet dashboard's
// queries return both clusters.
func TestFleetOfTwoClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two control planes, two Prometheus, VictoriaMetrics, vmalert and Alertmanager")
	}
	root := tooltest.Root(t)
	bin := binDir(t)
	dir := t.TempDir()
	vm := tooltest.Serve(t, "victoria-metrics", "/health", func(addr, dir string) []string {
		// Queries see what was written a moment ago, as the rules' windows
		// of seconds (on the compressed clock) need.
		return []string{"-httpListenAddr=" + addr, "-storageDataPath=" + dir, "-search.disableCache", "-search.latencyOffset=0s", "-loggerLevel=WARN"}
	})
	role, err := deploy.ReclaimerClusterRole(root)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "activity.token"), []byte("activity-token\n"), 0o600))

	type member struct {
		name, busy, idle string
		s                *stack.Stack
		node             *stack.Node
	}
	fleet := []*member{{name: "a", busy: "nb", idle: "train"}, {name: "b", busy: "train", idle: "nb"}}
	for _, m := range fleet {
		mdir := filepath.Join(dir, m.name)
		require.NoError(t, os.MkdirAll(mdir, 0o755))
		activity := map[string]float64{m.busy: 0.9, m.idle: 0}
		scenario := filepath.Join(mdir, "gpu-1.yaml")
		require.NoError(t, os.WriteFile(scenario, []byte(fleetScenario(activity["nb"], activity["train"])), 0o644))
		m.node = &stack.Node{Name: "gpu-1", Scenario: scenario}
		// No Rules: the cluster's Prometheus scrapes and writes to the
		// fleet's engine, whose ruler evaluates.
		m.s, err = stack.New(stack.Options{Bin: bin, Dir: mdir, Nodes: []*stack.Node{m.node}, Speed: 60, Kubernetes: true,
			IdleWindow: 5 * time.Second, ReclaimerRole: role, Cluster: m.name, RemoteWrite: vm.URL + "/api/v1/write"})
		require.NoError(t, err)
		t.Cleanup(func() {
			if t.Failed() {
				for _, c := range []string{"reclaimer", "prometheus", "exporter-gpu-1"} {
					t.Logf("cluster %s, %s:\n%s", m.name, c, lastLines(m.s.Log(c), 40))
				}
			}
			m.s.Stop()
		})
	}

	// One Alertmanager, one route per cluster to that cluster's reclaimer.
	var routes, receivers strings.Builder
	for _, m := range fleet {
		fmt.Fprintf(&routes, `    - matchers: ['audience="reclaimer"', '%s="%s"']
      receiver: reclaimer-%s
      group_by: [%s, alertname, uuid, namespace, pod, user]
      group_wait: 0s
      group_interval: 1s
      repeat_interval: 1m
`, names.LabelCluster, m.name, m.name, names.LabelCluster)
		fmt.Fprintf(&receivers, `  - name: reclaimer-%s
    webhook_configs:
      - {url: "%s/webhook", send_resolved: true, http_config: {authorization: {credentials: %s}}}
`, m.name, m.s.ReclaimerURL, stack.WebhookToken)
	}
	am := amtest.Start(t, "route:\n  receiver: people\n  routes:\n"+routes.String()+"receivers:\n  - name: people\n"+receivers.String())

	for _, m := range fleet {
		require.NoError(t, m.s.StartKubernetes(ctx))
		require.NoError(t, m.s.CreatePods(ctx))
		require.Eventually(t, func() bool {
			pods, err := m.s.Admin.CoreV1().Pods("lab").List(ctx, metav1.ListOptions{})
			if err != nil || len(pods.Items) != 2 {
				return false
			}
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodRunning {
					return false
				}
			}
			return true
		}, 60*time.Second, 200*time.Millisecond, "kwok runs cluster %s's pods", m.name)
		require.NoError(t, m.s.StartExporters(ctx))
		m.s.AlertmanagerURL = am.URL
		require.NoError(t, m.s.StartReclaimer(ctx, fmt.Sprintf(`cluster: %s
prometheus: {url: %q, interval: 1s}
activity: {bearer_token_file: %s}
notifiers: [{type: log}]
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 5s, min_runtime: 0s}]
`, m.name, vm.URL, filepath.Join(dir, "activity.token"))))
		require.NoError(t, m.s.StartPrometheus(ctx))
	}

	// The demo's rules, but for the idle lookback: VictoriaMetrics makes a
	// sample searchable a second or two after it is written, and vmalert's
	// records reach the rules that read them through it, so a window must
	// outlast that (8 s here; the production lookback is minutes).
	demo, err := os.ReadFile(filepath.Join(root, "rules", "demo.yaml"))
	require.NoError(t, err)
	fleetRules := strings.Replace(string(demo), "lookback: 3s", "lookback: 8s", 1)
	require.NotEqual(t, string(demo), fleetRules, "rules/demo.yaml sets idle.lookback")
	c, err := rules.Parse([]byte(fleetRules))
	require.NoError(t, err)
	ruleText, err := rules.Render(c)
	require.NoError(t, err)
	ruleFile := filepath.Join(dir, "rules.yml")
	require.NoError(t, os.WriteFile(ruleFile, ruleText, 0o644))
	vmalert := tooltest.Serve(t, "vmalert", "/health", func(addr, _ string) []string {
		// Every second, at now (VictoriaMetrics hides no recent data), a
		// bare selector reaching back 10 s; records are written back at
		// once, for the rules that read them.
		return []string{"-rule=" + ruleFile, "-datasource.url=" + vm.URL, "-remoteWrite.url=" + vm.URL, "-remoteWrite.flushInterval=100ms",
			"-notifier.url=" + am.URL, "-evaluationInterval=1s", "-rule.evalDelay=0s", "-datasource.queryStep=10s",
			"-httpListenAddr=" + addr, "-loggerLevel=WARN"}
	})

	started := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(vmalert.Dir, "vmalert.log"))
			t.Logf("vmalert:\n%s", lastLines(string(b), 40))
			series, err := stack.QueryAt(ctx, vm.URL, `count by (cluster, __name__) ({__name__=~"gpureclaim_unit_.*|.*:.*|ALERTS"})`, time.Time{})
			t.Logf("the series in VictoriaMetrics now (%v): %v", err, series)
			for _, q := range []string{`ALERTS{alertname="GPUIdle"}`, "uuid:gpureclaim_unit_activity:ratio", "uuid:gpureclaim_unit_activity:max_idle_lookback", "uuid_owner:gpureclaim_unit_held:info",
				"uuid_owner:gpureclaim_unit_idle_held:activity", "owner:gpureclaim_allocation_units:count", "owner:gpureclaim_allocation_idle_units:count", "uuid_owner:gpureclaim_unit_idle_whole:activity"} {
				res, err := stack.QueryAt(ctx, vm.URL, q, time.Time{})
				t.Logf("%s (%v): %v", q, err, res)
			}
			resp, err := http.Get(am.URL + "/api/v2/alerts")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("Alertmanager's alerts: %s", b)
			}
		}
	})
	// Each cluster's idle pod is freed by its own reclaimer; its busy pod
	// of the same name in the other cluster runs on.
	timeline := []string{fmt.Sprintf("%5.1fs  vmalert evaluates the rules over both clusters' series", 0.0)}
	for _, m := range fleet {
		r := waitReclaim(t, m.s, m.idle, "done", 3*time.Minute)
		require.Equal(t, m.name, r.Labels.Get(names.LabelCluster))
		require.Eventually(t, func() bool {
			_, err := m.s.Admin.CoreV1().Pods("lab").Get(ctx, m.idle, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 30*time.Second, 100*time.Millisecond, "cluster %s: lab/%s is gone", m.name, m.idle)
		at := func(t time.Time) float64 { return t.Sub(started).Seconds() }
		timeline = append(timeline,
			fmt.Sprintf("%5.1fs  cluster %s: vmalert's GPUIdle for lab/%s starts", at(r.StartsAt), m.name, m.idle),
			fmt.Sprintf("%5.1fs  cluster %s: it reaches cluster %s's reclaimer", at(r.Created), m.name, m.name),
			fmt.Sprintf("%5.1fs  cluster %s: lab/%s's owner warned", at(r.Warning.At), m.name, m.idle),
			fmt.Sprintf("%5.1fs  cluster %s: lab/%s evicted", at(r.ActedAt), m.name, m.idle),
			fmt.Sprintf("%5.1fs  cluster %s: its GPU seen released: %s", at(r.ReleasedAt), m.name, r.State))
	}
	time.Sleep(5 * time.Second) // a wrong action would have fallen due
	for _, m := range fleet {
		p, err := m.s.Admin.CoreV1().Pods("lab").Get(ctx, m.busy, metav1.GetOptions{})
		require.NoError(t, err, "cluster %s: lab/%s, busy here, idle in the other cluster, runs on", m.name, m.busy)
		require.Nil(t, p.DeletionTimestamp, "cluster %s: lab/%s", m.name, m.busy)
		items, err := m.s.Reclaims(ctx)
		require.NoError(t, err)
		var acted []string
		for i := range items {
			r, _, err := reclaim.FromAPI(&items[i])
			require.NoError(t, err)
			t.Logf("cluster %s: %s on lab/%s: %s", m.name, r.Target.Alertname, r.Target.Pod, r.State)
			require.Equal(t, m.name, r.Labels.Get(names.LabelCluster), "cluster %s records its own cluster's alerts alone", m.name)
			if !r.ActedAt.IsZero() {
				acted = append(acted, r.Target.Pod)
			}
		}
		require.Equal(t, []string{m.idle}, acted, "cluster %s: one action, on its own idle pod", m.name)

		// Every action against the fleet's series of this cluster alone.
		scope := labels.MustNewMatcher(labels.MatchEqual, names.LabelCluster, m.name)
		checked := noWrongAction(t, m.s, func(ctx context.Context, q string, at time.Time) ([]map[string]string, error) {
			scoped, err := promscope.Scope(q, scope)
			if err != nil {
				return nil, err
			}
			return stack.QueryAt(ctx, vm.URL, scoped, at)
		})
		require.Equal(t, 1, checked)

		// Each reclaimer's activity endpoint reads its own cluster.
		for pod, active := range map[string]bool{m.busy: true, m.idle: false} {
			require.Equal(t, active, hasActivity(t, m.s.ReclaimerURL, "lab", pod), "cluster %s: lab/%s", m.name, pod)
		}
	}

	// The fleet dashboard's queries answer on the fleet's engine, and its
	// panels by cluster come to show both clusters over the story. A cost
	// is a record of a record of a record, each read back through the
	// engine after a remote write, so the last cluster's may trail its
	// release on a busy machine: wait for it rather than for the clock.
	fleetDashboard := panels(t, filepath.Join(root, "dashboards", "fleet.json"))
	require.NotEmpty(t, fleetDashboard)
	both := []string{"a", "b"}
	for _, p := range fleetDashboard {
		for _, expr := range p.exprs {
			q := grafana.Replace(expr)
			if !strings.HasSuffix(p.title, "by cluster") {
				_, err := rangeClusters(vm.URL, q, started, time.Now())
				assert.NoError(t, err, "%s: %s", p.title, q)
				continue
			}
			var clusters []string
			var err error
			if !assert.Eventually(t, func() bool {
				clusters, err = rangeClusters(vm.URL, q, started, time.Now())
				return err == nil && slices.Equal(clusters, both)
			}, 2*time.Minute, time.Second) {
				t.Errorf("panel %q over the story shows clusters %v, want %v (%v): %s", p.title, clusters, both, err, q)
				continue
			}
			timeline = append(timeline, fmt.Sprintf("%5.1fs  panel %q shows both clusters", time.Since(started).Seconds(), p.title))
		}
	}
	for _, line := range timeline {
		t.Log(line)
	}
}

// waitReclaim waits until the stack's reclaimer has a reclaim of lab/pod
// in state, and returns it.
func waitReclaim(t *testing.T, s *stack.Stack, pod, state string, within time.Duration) *reclaim.Reclaim {
	t.Helper()
	var found *reclaim.Reclaim
	require.Eventually(t, func() bool {
		items, err := s.Reclaims(ctx)
		if err != nil {
			return false
		}
		for i := range items {
			r, _, err := reclaim.FromAPI(&items[i])
			require.NoError(t, err)
			if r.Target.Namespace == "lab" && r.Target.Pod == pod && string(r.State) == state {
				found = r
				return true
			}
		}
		return false
	}, within, 200*time.Millisecond, "a reclaim of lab/%s %s", pod, state)
	return found
}

// hasActivity asks a reclaimer's activity endpoint whether the pod's GPU
// was active of late.
func hasActivity(t *testing.T, reclaimer, ns, pod string) bool {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, reclaimer+"/api/v1/activity?namespace="+url.QueryEscape(ns)+"&pod="+url.QueryEscape(pod), nil)
	req.Header.Set("Authorization", "Bearer activity-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	var a struct {
		HasActivity bool `json:"has_activity"`
	}
	require.NoError(t, json.Unmarshal(b, &a), "%s", b)
	return a.HasActivity
}

// rangeClusters runs a range query, as a Grafana panel does, and returns
// the clusters its series name.
func rangeClusters(base, q string, from, to time.Time) ([]string, error) {
	series, err := stack.QueryRange(ctx, base, q, from, to, time.Second)
	if err != nil {
		return nil, err
	}
	var clusters []string
	for _, s := range series {
		if c, ok := s[names.LabelCluster]; ok && !slices.Contains(clusters, c) {
			clusters = append(clusters, c)
		}
	}
	slices.Sort(clusters)
	return clusters, nil
}

// lastLines is the end of a log, for a failure's message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
