// Package e2e runs the whole system on loopback, on a compressed clock (a
// scenario minute is a second): two simulated GPU nodes whose pods are real
// pods on kwok nodes of a real Kubernetes control plane, the exporters,
// Prometheus with the rules, Alertmanager, the reclaimer and a fake Slack.
// Every scenario is asserted from the outside: Kubernetes objects, the
// node's process table, Prometheus's and Alertmanager's APIs, Slack's record.
package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/sim/stack"
	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeslack"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/rules"
)

const signingSecret = "e2e-signing-secret"

var ctx = context.Background()

func ptr[T any](v T) *T { return &v }

type suite struct {
	t       *testing.T
	s       *stack.Stack
	slack   *fakeslack.Server
	started time.Time // the scenarios' time 0
	nodeA   *stack.Node
	nodeB   *stack.Node
	nodeC   *stack.Node
	draPod  string // the DRA Job's pod on gpu-c
	out     string
	times   []string
}

// binDir holds this tree's exporter and reclaimer, freshly built, and the pinned tools.
func binDir(t *testing.T) string {
	dir := t.TempDir()
	tooltest.Build(t, dir, "./exporter/simulated", "gpureclaim-exporter-sim")
	tooltest.Build(t, dir, "./reclaimer", "gpureclaim-reclaimer")
	for _, tool := range []string{"prometheus", "alertmanager", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwok-stages.yaml"} {
		require.NoError(t, os.Symlink(tooltest.Bin(t, tool), filepath.Join(dir, tool)))
	}
	return dir
}

func nodeAScenario(chatPod string) string {
	return fmt.Sprintf(`node: gpu-a
system: dgxh100
users: {bob: 1001}
pods:
  - {name: train-0, namespace: research, container: main, annotations: {gpureclaim.io/owner: U0ALICE}}
  - {name: nb-idle, namespace: lab, container: main, annotations: {gpureclaim.io/owner: U0CAROL}}
  - {name: %s, namespace: serving, container: main, annotations: {gpureclaim.io/owner: U0DAVE}}
  - {name: keeper, namespace: lab, container: main, labels: {gpureclaim.io/keep: "true"}, annotations: {gpureclaim.io/owner: U0CAROL}}
  - {name: snoozy, namespace: lab, container: main, annotations: {gpureclaim.io/owner: U0CAROL}}
  - {name: flappy, namespace: flappy, container: main, annotations: {gpureclaim.io/owner: U0ERIN}}
gpus:
  - {index: 0, sm_active: 0.9, pods: [train-0], processes: [{pid: 2001, pod: train-0, memory_used: 60GiB, started: -3h}]}
  - {index: 1, sm_active: 0, pods: [nb-idle], processes: [{pid: 2002, pod: nb-idle, memory_used: 20GiB, started: -3h}]}
  - {index: 2, sm_active: 0, pods: [%s], processes: [{pid: 2003, pod: %s, memory_used: 30GiB, started: -3h}]}
  - {index: 3, sm_active: 0, processes: [{pid: 2004, user: bob, command: python idle.py, memory_used: 10GiB, started: -3h}]}
  - {index: 4, sm_active: 0, pods: [keeper], processes: [{pid: 2005, pod: keeper, memory_used: 10GiB, started: -3h}]}
  - {index: 6, sm_active: 0, pods: [snoozy], processes: [{pid: 2006, pod: snoozy, memory_used: 10GiB, started: -3h}]}
  - index: 7
    sm_active: {steps: {points: [{at: 0s, value: 0}, {at: 25m, value: 0.8}]}}
    pods: [flappy]
    processes: [{pid: 2007, pod: flappy, memory_used: 10GiB, started: -3h}]
`, chatPod, chatPod, chatPod)
}

// nodeBScenario has a MIG GPU and the pods of a Job, of a Kubeflow
// Notebook and of a KServe InferenceService, whose names their controllers
// choose.
func nodeBScenario(jobPod, notebookPod, predictorPod string) string {
	return fmt.Sprintf(`node: gpu-b
system: dgxh100
pods:
  - {name: mig-busy, namespace: research, container: main, annotations: {gpureclaim.io/owner: U0ALICE}}
  - {name: mig-idle, namespace: research, container: main, annotations: {gpureclaim.io/owner: U0ALICE}}
  - {name: %[1]s, namespace: batch, container: main}
  - {name: %[2]s, namespace: notebooks, container: main}
  - {name: %[3]s, namespace: kserve, container: main}
  - {name: share-busy, namespace: shared, container: main, annotations: {gpureclaim.io/owner: U0FRANK}}
  - {name: share-idle, namespace: shared, container: main, annotations: {gpureclaim.io/owner: U0FRANK}}
  - {name: viewer, namespace: browsed, container: main, annotations: {gpureclaim.io/owner: U0IVAN}}
gpus:
  - index: 0
    mig:
      - {profile: 3g.40gb, sm_active: 0.25, pods: [mig-busy], processes: [{pid: 3001, pod: mig-busy, memory_used: 7GiB, started: -3h}]}
      - {profile: 1g.10gb, sm_active: 0, pods: [mig-idle], processes: [{pid: 3002, pod: mig-idle, memory_used: 4GiB, started: -3h}]}
  - {index: 1, sm_active: 0, pods: [%[1]s], processes: [{pid: 3003, pod: %[1]s, memory_used: 40GiB, started: -3h}]}
  - {index: 2, sm_active: 0, pods: [%[2]s], processes: [{pid: 3004, pod: %[2]s, memory_used: 12GiB, started: -3h}]}
  - {index: 3, sm_active: 0, pods: [%[3]s], processes: [{pid: 3005, pod: %[3]s, memory_used: 30GiB, started: -3h}]}
  # Time-sliced between two pods: one busy, one whose own process does nothing.
  - index: 4
    sm_active: 0.5
    pods: [share-busy, share-idle]
    processes:
      - {pid: 3006, pod: share-busy, memory_used: 20GiB, sm_util: 0.5, started: -3h}
      - {pid: 3007, pod: share-idle, memory_used: 10GiB, sm_util: 0, started: -3h}
  # Idle, under a policy whose grace outlasts the suite: pending for the browser.
  - {index: 5, sm_active: 0, pods: [viewer], processes: [{pid: 3008, pod: viewer, memory_used: 5GiB, started: -3h}]}
`, jobPod, notebookPod, predictorPod)
}

func reclaimerConfig(slackURL, dir string) string {
	return fmt.Sprintf(`notifiers:
  - type: log
  - type: slack
    slack:
      token_file: %s
      signing_secret_file: %s
      api_url: %q
      admins: [U0ADMIN]
      users: {bob: U0BOB}
      snoozes: [8s, 4h, 24h]
      max_requests_per_minute: 6000
release: {interval: 1s, timeouts: {InferenceService: 15s}}
policies:
  - {name: services, matchers: ['alertname="GPUIdle"', 'namespace="serving"'], action: scale_down, grace: 5s, min_runtime: 0s}
  - {name: flappy, matchers: ['alertname="GPUIdle"', 'namespace="flappy"'], action: auto, grace: 40s, min_runtime: 0s}
  - {name: browsed, matchers: ['alertname="GPUIdle"', 'namespace="browsed"'], action: auto, grace: 1h, min_runtime: 0s}
  - {name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 5s, min_runtime: 0s}
  - {name: notify, matchers: ['alertname=~"GPUWasted|GPUOvercommitted|MIGInstanceOversized"'], action: notify}
`, filepath.Join(dir, "slack.token"), filepath.Join(dir, "slack.signing"), slackURL)
}

func start(t *testing.T) *suite {
	root := tooltest.Root(t)
	dir := t.TempDir()
	su := &suite{t: t, slack: fakeslack.New(t), out: t.ArtifactDir()}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "slack.token"), []byte("xoxb-e2e\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "slack.signing"), []byte(signingSecret+"\n"), 0o600))
	// The Deployment's pod name is known once it exists: the scenario follows.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gpu-a.yaml"), []byte(nodeAScenario("placeholder")), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gpu-b.yaml"), []byte(nodeBScenario("placeholder-job", "placeholder-nb", "placeholder-isvc")), 0o644))
	su.nodeA = &stack.Node{Name: "gpu-a", Scenario: filepath.Join(dir, "gpu-a.yaml")}
	su.nodeB = &stack.Node{Name: "gpu-b", Scenario: filepath.Join(dir, "gpu-b.yaml")}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gpu-c.yaml"), []byte(nodeCScenario), 0o644))
	su.nodeC = &stack.Node{Name: "gpu-c", Scenario: filepath.Join(dir, "gpu-c.yaml")}
	rulesFile, err := rules.RenderFile(filepath.Join(root, "rules", "demo.yaml"))
	require.NoError(t, err)
	role, err := deploy.ReclaimerClusterRole(root)
	require.NoError(t, err)
	s, err := stack.New(stack.Options{Bin: binDir(t), Dir: dir, Nodes: []*stack.Node{su.nodeA, su.nodeB, su.nodeC}, Speed: 60,
		Rules: rulesFile, Kubernetes: true, IdleWindow: 5 * time.Second,
		ReclaimerRole: role})
	require.NoError(t, err)
	su.s = s
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{"reclaimer", "prometheus", "alertmanager", "exporter-gpu-a", "exporter-gpu-b", "exporter-gpu-c"} {
				_ = os.WriteFile(filepath.Join(su.out, c+".log"), []byte(s.Log(c)), 0o644)
			}
		}
		s.Stop()
	})
	require.NoError(t, s.StartKubernetes(ctx))
	chatPod := su.deployChatAPI()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gpu-a.yaml"), []byte(nodeAScenario(chatPod)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gpu-b.yaml"), []byte(nodeBScenario(su.deployJob(), su.deployNotebook(), su.deployInferenceService())), 0o644))
	su.draPod = su.deployDRAJob()
	su.deploySharedClaim()
	require.NoError(t, su.s.CreatePods(ctx))
	su.waitRunning()
	su.draWaiter()
	require.NoError(t, su.s.StartExporters(ctx))
	su.started = time.Now()
	require.NoError(t, su.s.StartAlertmanager(ctx))
	require.NoError(t, su.s.StartReclaimer(ctx, reclaimerConfig(su.slack.GetAPIURL(), dir)))
	require.NoError(t, su.s.StartPrometheus(ctx))
	return su
}

func (su *suite) deployChatAPI() string {
	admin := su.s.Admin
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "serving"}}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	spec := stack.PodSpec("gpu-a", 1)
	_, err = admin.AppsV1().Deployments("serving").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "chat-api"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "chat-api"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "chat-api"}, Annotations: map[string]string{"gpureclaim.io/owner": "U0DAVE"}}, Spec: spec}},
	}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	return su.onePod("serving", "app=chat-api")
}

// waitRunning waits until kwok runs every pod.
func (su *suite) waitRunning() {
	require.Eventually(su.t, func() bool {
		pods, err := su.s.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) < 17 { // six on gpu-a, eight on gpu-b, three on gpu-c
			return false
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	}, 60*time.Second, 200*time.Millisecond, "kwok runs the pods")
}

// reclaimOf is the oldest reclaim the API lists that pred accepts, read
// back from the public type; an empty one if none.
func (su *suite) reclaimOf(pred func(*reclaim.Reclaim) bool) (*reclaim.Reclaim, bool) {
	items, err := su.s.Reclaims(ctx)
	if err != nil {
		return &reclaim.Reclaim{}, false
	}
	var rs []*reclaim.Reclaim
	for i := range items {
		r, _, err := reclaim.FromAPI(&items[i])
		require.NoError(su.t, err)
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Created.Before(rs[j].Created) })
	for _, r := range rs {
		if pred(r) {
			return r, true
		}
	}
	return &reclaim.Reclaim{}, false
}

func pod(ns, name string) func(*reclaim.Reclaim) bool {
	return func(r *reclaim.Reclaim) bool { return r.Target.Namespace == ns && r.Target.Pod == name }
}

func (su *suite) waitState(what string, pred func(*reclaim.Reclaim) bool, state string, within time.Duration) *reclaim.Reclaim {
	var r *reclaim.Reclaim
	require.Eventually(su.t, func() bool {
		var ok bool
		r, ok = su.reclaimOf(func(x *reclaim.Reclaim) bool { return pred(x) && string(x.State) == state })
		return ok
	}, within, 200*time.Millisecond, "%s: %s", what, state)
	return r
}

func (su *suite) podGone(ns, name string) bool {
	_, err := su.s.Admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// waitPodGone waits out an evicted pod's termination: the eviction is
// accepted at once, the kubelet (kwok here) deletes the pod a moment later.
func (su *suite) waitPodGone(t *testing.T, ns, name string) {
	t.Helper()
	require.Eventually(t, func() bool { return su.podGone(ns, name) }, 30*time.Second, 100*time.Millisecond, "pod %s/%s is still there", ns, name)
}

// freed waits until Prometheus sees no owner on the unit.
func (su *suite) freed(uuid string) time.Time {
	require.Eventually(su.t, func() bool {
		owners, err := su.s.Query(ctx, fmt.Sprintf(`gpureclaim_unit_owner_info{uuid=%q}`, uuid))
		return err == nil && len(owners) == 0
	}, 30*time.Second, 200*time.Millisecond, "unit %s freed", uuid)
	return time.Now()
}

func (su *suite) timing(scenario string, idleAt, warned, freed time.Time) {
	line := fmt.Sprintf("%-40s idle → warned %5.1fs   idle → freed %5.1fs   (scenario minutes: %4.1f, %4.1f)",
		scenario, warned.Sub(idleAt).Seconds(), freed.Sub(idleAt).Seconds(), warned.Sub(idleAt).Minutes()*60, freed.Sub(idleAt).Minutes()*60)
	su.times = append(su.times, line)
	su.t.Log(line)
}

// pressQuiet sends a signed Slack button press to the reclaimer, as Slack does.
func (su *suite) pressQuiet(user, action, value string) int {
	p, _ := json.Marshal(map[string]any{
		"type": "block_actions", "user": map[string]string{"id": user, "name": strings.ToLower(user[2:])},
		"channel": map[string]string{"id": "D" + user[1:]}, "message": map[string]string{"ts": "1.1"},
		"actions": []map[string]string{{"action_id": action, "block_id": "gpureclaim", "value": value, "type": "button", "action_ts": fmt.Sprint(time.Now().UnixNano())}},
	})
	body := "payload=" + url.QueryEscape(string(p))
	ts := fmt.Sprint(time.Now().Unix())
	mac := hmac.New(sha256.New, []byte(signingSecret))
	mac.Write([]byte("v0:" + ts + ":" + body))
	req, _ := http.NewRequest(http.MethodPost, su.s.ReclaimerURL+"/slack/interactions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (su *suite) unitUUID(node string, gpuIndex int, profile string) string {
	q := fmt.Sprintf(`gpureclaim_unit_info{node=%q, gpu_index="%d", mig_profile=%q}`, node, gpuIndex, profile)
	var uuid string
	require.Eventually(su.t, func() bool {
		r, err := su.s.Query(ctx, q)
		if err != nil || len(r) != 1 {
			return false
		}
		uuid = r[0]["uuid"]
		return true
	}, 30*time.Second, 200*time.Millisecond, q)
	return uuid
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	chromium := tooltest.System(t, "chromium")
	su := start(t)
	snoozedAt := su.snoozeWhenWarned("lab", "snoozy")

	t.Run("the status page in a real browser", func(t *testing.T) {
		su.statusPage(t, chromium)
	})

	t.Run("an idle held GPU: warned, then its pod evicted", func(t *testing.T) {
		r := su.waitState("nb-idle", pod("lab", "nb-idle"), "done", 90*time.Second)
		su.waitPodGone(t, "lab", "nb-idle")
		require.Equal(t, config.ActionEvict, r.Action)
		require.Contains(t, headers(su.slack.Posts(), "D0CAROL"), "Idle GPU: it will be reclaimed")
		su.timing("idle pod → evicted", su.started, r.Warning.At, su.freed(r.Target.UUID))
	})

	t.Run("an idle inference Deployment: scaled down, then restored", func(t *testing.T) {
		r := su.waitState("chat-api", func(x *reclaim.Reclaim) bool { return x.Target.Namespace == "serving" }, "done", 60*time.Second)
		require.Equal(t, config.ActionScaleDown, r.Action)
		d, err := su.s.Admin.AppsV1().Deployments("serving").Get(ctx, "chat-api", metav1.GetOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 0, *d.Spec.Replicas)
		require.Equal(t, "1", d.Annotations["gpureclaim.io/replicas-before-scale-down"])
		su.timing("idle Deployment → scaled down", su.started, r.Warning.At, su.freed(r.Target.UUID))

		su.restore(t, r.ID)
		require.Eventually(t, func() bool {
			pods, err := su.s.Admin.CoreV1().Pods("serving").List(ctx, metav1.ListOptions{LabelSelector: "app=chat-api"})
			if err != nil || len(pods.Items) != 1 {
				return false
			}
			return pods.Items[0].Status.Phase == corev1.PodRunning && pods.Items[0].DeletionTimestamp == nil
		}, 60*time.Second, 200*time.Millisecond, "restored: a new pod runs")
		d, _ = su.s.Admin.AppsV1().Deployments("serving").Get(ctx, "chat-api", metav1.GetOptions{})
		require.EqualValues(t, 1, *d.Spec.Replicas)
	})

	t.Run("an idle Job: suspended, its pod deleted by the Job controller, none started, then resumed", su.idleJob)

	t.Run("an idle Kubeflow Notebook: the stop annotation, its StatefulSet at 0, then started", su.idleNotebook)

	t.Run("an idle Job on a GPU allocated through DRA: suspended, its claim deallocated, and a waiting pod gets the GPU", su.idleDRAJob)

	t.Run("a GPU that falls off the bus: exported as down, and GPUUnreadable fires", su.lostGPU)

	t.Run("an idle InferenceService whose controller ignores the stop: not released, and said so", su.ignoredStop)

	t.Run("a bare-metal process: killed through the node endpoint", func(t *testing.T) {
		r := su.waitState("bob", func(x *reclaim.Reclaim) bool { return x.Target.User == "bob" }, "done", 60*time.Second)
		require.Equal(t, config.ActionKill, r.Action)
		uuid := su.unitUUID("gpu-a", 3, "")
		require.Eventually(t, func() bool {
			p, err := su.s.Query(ctx, fmt.Sprintf(`gpureclaim_unit_processes{uuid=%q} == 0`, uuid))
			return err == nil && len(p) == 1
		}, 30*time.Second, 200*time.Millisecond, "the process left the GPU")
		k, err := su.s.Query(ctx, `gpureclaim_exporter_actions_total{result="killed"} > 0`)
		require.NoError(t, err)
		require.Len(t, k, 1, "one node killed")
		require.Contains(t, headers(su.slack.Posts(), "D0BOB"), "Idle GPU")
		su.timing("idle bare-metal process → killed", su.started, r.Warning.At, su.freed(uuid))
	})

	t.Run("a MIG slice reclaimed while its neighbour keeps running", func(t *testing.T) {
		r := su.waitState("mig-idle", pod("research", "mig-idle"), "done", 60*time.Second)
		su.waitPodGone(t, "research", "mig-idle")
		require.False(t, su.podGone("research", "mig-busy"))
		big := su.unitUUID("gpu-b", 0, "3g.40gb")
		o, err := su.s.Query(ctx, fmt.Sprintf(`gpureclaim_unit_owner_processes{uuid=%q,pod="mig-busy"} == 1`, big))
		require.NoError(t, err)
		require.Len(t, o, 1, "the neighbour still works on its slice")
		su.timing("idle MIG slice → evicted", su.started, r.Warning.At, su.freed(r.Target.UUID))
	})

	t.Run("an alert that resolves during the grace: cancelled", func(t *testing.T) {
		r := su.waitState("flappy", pod("flappy", "flappy"), "cancelled", 90*time.Second)
		require.Contains(t, r.Reason, "busy again")
		require.False(t, su.podGone("flappy", "flappy"))
		// The owner's message is updated on the step after the cancel is recorded.
		require.Eventually(t, func() bool { return strings.Contains(headers(su.slack.Updates(), "D0ERIN"), "Cancelled") }, 10*time.Second, 100*time.Millisecond, "the warning is updated to Cancelled")
		su.times = append(su.times, fmt.Sprintf("%-40s idle → warned %5.1fs   busy again at 25.0s → cancelled %5.1fs", "flapping GPU → cancelled", r.Warning.At.Sub(su.started).Seconds(), time.Since(su.started).Seconds()))
	})

	t.Run("a snooze pressed in Slack: a silence, no action until it ends", func(t *testing.T) {
		pressed := <-snoozedAt
		require.False(t, pressed.IsZero(), "the owner could press snooze")
		require.NotEmpty(t, silencesBy(t, su.s.AlertmanagerURL, "carol (Slack U0CAROL)"))
		done := su.waitState("snoozy", pod("lab", "snoozy"), "done", 90*time.Second)
		su.waitPodGone(t, "lab", "snoozy")
		require.True(t, done.ActedAt.After(pressed.Add(8*time.Second)), "no action before the 8 s snooze ended (pressed %s, acted %s)", pressed, done.ActedAt)
		require.GreaterOrEqual(t, strings.Count(headers(su.slack.Posts(), "D0CAROL"), "Idle GPU: it will be reclaimed"), 3, "nb-idle's warning, snoozy's, and snoozy's again")
		require.Contains(t, headers(su.slack.Updates(), "D0CAROL"), "Snoozed")
		su.times = append(su.times, fmt.Sprintf("%-40s snoozed %5.1fs after idle, for 8 s; warned again and reclaimed %5.1fs after idle", "snoozed GPU → warned again → evicted", pressed.Sub(su.started).Seconds(), done.ActedAt.Sub(su.started).Seconds()))
	})

	t.Run("a busy GPU, a kept pod and a free GPU are untouched", func(t *testing.T) {
		for _, p := range [][2]string{{"research", "train-0"}, {"lab", "keeper"}} {
			require.False(t, su.podGone(p[0], p[1]), p[1])
			_, found := su.reclaimOf(pod(p[0], p[1]))
			require.False(t, found, "no reclaim for %s", p[1])
		}
		free := su.unitUUID("gpu-a", 5, "")
		_, found := su.reclaimOf(func(r *reclaim.Reclaim) bool { return r.Target.UUID == free })
		require.False(t, found)
		idle, err := su.s.Query(ctx, `uuid_owner:gpureclaim_unit_idle_held:activity{pod="keeper",keep="true"}`)
		require.NoError(t, err)
		require.Len(t, idle, 1, "the kept pod is idle, and counted so, but never reclaimed")
	})

	for _, sh := range []struct{ what, ns, busy, idle string }{
		{"time-sliced", "shared", "share-busy", "share-idle"},
		{"through one ResourceClaim", "dra-shared", "share-a", "share-b"},
	} {
		t.Run("a GPU two pods share "+sh.what+": the idle one evicted, the busy one never touched", func(t *testing.T) {
			r := su.waitState(sh.idle, pod(sh.ns, sh.idle), "done", 90*time.Second)
			su.waitPodGone(t, sh.ns, sh.idle)
			require.Equal(t, "holder_sm_utilization", r.Labels.Get("signal"), "judged on its own share, attributed by the node's pod list")
			require.False(t, su.podGone(sh.ns, sh.busy))
			_, found := su.reclaimOf(pod(sh.ns, sh.busy))
			require.False(t, found, "the busy pod is never warned")
			busy, err := su.s.Query(ctx, fmt.Sprintf(`gpureclaim_unit_owner_processes{namespace=%q,pod=%q} == 1`, sh.ns, sh.busy))
			require.NoError(t, err)
			require.Len(t, busy, 1, "its process is its own")
			su.timing("idle pod on a GPU shared "+sh.what+" → evicted", su.started, r.Warning.At, time.Now())
		})
	}

	t.Run("no action on a holder that was busy or kept at the moment of the act", func(t *testing.T) {
		n := su.noWrongAction(t)
		su.times = append(su.times, fmt.Sprintf("%-40s %d actions checked against the exporters' series", "no wrong action", n))
	})

	t.Run("every dashboard query returns data", func(t *testing.T) {
		su.dashboards(t)
	})

	require.NoError(t, os.WriteFile(filepath.Join(su.out, "timings.txt"), []byte(strings.Join(su.times, "\n")+"\n"), 0o644))
}

// snoozeWhenWarned presses Snooze (8 s) on a pod's warning as soon as it is
// sent, as its owner would, and says when.
func (su *suite) snoozeWhenWarned(ns, name string) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			if r, ok := su.reclaimOf(pod(ns, name)); ok && r.Warning.Sent && r.State == "pending" {
				if su.pressQuiet("U0CAROL", "snooze_8", r.ID) == http.StatusOK {
					for i := 0; i < 50; i++ {
						if x, _ := su.reclaimOf(pod(ns, name)); x.State == "snoozed" {
							out <- time.Now()
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		out <- time.Time{}
	}()
	return out
}

// headers lists the headers of the messages to one channel.
func headers(ms []fakeslack.Message, channel string) string {
	var b strings.Builder
	for _, m := range ms {
		if m.Channel == channel {
			b.WriteString(fakeslack.Header(m) + "\n")
		}
	}
	return b.String()
}

func silencesBy(t *testing.T, am, by string) []string {
	resp, err := http.Get(am + "/api/v2/silences")
	require.NoError(t, err)
	defer resp.Body.Close()
	var ss []struct {
		ID        string `json:"id"`
		CreatedBy string `json:"createdBy"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ss))
	var out []string
	for _, s := range ss {
		if s.CreatedBy == by {
			out = append(out, s.ID)
		}
	}
	return out
}
