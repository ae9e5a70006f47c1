package e2e

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/sim/stack"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/rules"
)

// dcgmScenario is a node whose exporter serves dcgm-exporter's exposition:
// an idle pod, a busy pod, and an idle MIG instance held by a pod, each
// through a ResourceClaim of NVIDIA's DRA driver (dcgm-exporter's dra_*
// labels).
const dcgmScenario = `node: gpu-d
system: dgxh100
allocation: dra
pods:
  - {name: idle-d, namespace: lab, container: main}
  - {name: busy-d, namespace: lab, container: main}
  - {name: mig-d, namespace: lab, container: main}
gpus:
  - {index: 0, sm_active: 0, pods: [idle-d], processes: [{pid: 4001, pod: idle-d, memory_used: 20GiB, started: -3h}]}
  - {index: 1, sm_active: 0.8, pods: [busy-d], processes: [{pid: 4002, pod: busy-d, memory_used: 40GiB, started: -3h}]}
  - index: 2
    mig:
      - {profile: 3g.40gb, sm_active: 0, pods: [mig-d], processes: [{pid: 4003, pod: mig-d, memory_used: 8GiB, started: -3h}]}
`

// The whole system once on a cluster that runs dcgm-exporter instead of
// gpureclaim's exporter: the rules for source: dcgm read its exposition
// (as a scrape with honor_labels keeps it), the reclaimer acts as ever.
func TestEndToEndDCGM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	root := tooltest.Root(t)
	dir := t.TempDir()
	su := &suite{t: t, out: t.ArtifactDir()}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gpu-d.yaml"), []byte(dcgmScenario), 0o644))
	node := &stack.Node{Name: "gpu-d", Scenario: filepath.Join(dir, "gpu-d.yaml")}

	c, err := rules.Load(filepath.Join(root, "rules", "demo.yaml"))
	require.NoError(t, err)
	c.Source, c.DCGM = rules.SourceDCGM, rules.DCGM{Job: names.ExporterJob, HonorLabels: true}
	rulesFile, err := rules.Render(c)
	require.NoError(t, err)
	role, err := deploy.ReclaimerClusterRole(root)
	require.NoError(t, err)
	s, err := stack.New(stack.Options{Bin: binDir(t), Dir: dir, Nodes: []*stack.Node{node}, Speed: 60, DCGM: true,
		Rules: rulesFile, Kubernetes: true, ReclaimerRole: role})
	require.NoError(t, err)
	su.s = s
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{"reclaimer", "prometheus", "alertmanager", "exporter-gpu-d"} {
				_ = os.WriteFile(filepath.Join(su.out, "dcgm-"+c+".log"), []byte(s.Log(c)), 0o644)
			}
		}
		s.Stop()
	})
	require.NoError(t, s.StartKubernetes(ctx))
	require.NoError(t, s.CreatePods(ctx))
	require.Eventually(t, func() bool { return len(su.livePods("lab", "")) == 3 && su.allRunning("lab") }, 60*time.Second, 200*time.Millisecond, "kwok runs the pods")
	require.NoError(t, s.StartExporters(ctx))
	su.started = time.Now()
	require.NoError(t, s.StartAlertmanager(ctx))
	require.NoError(t, s.StartReclaimer(ctx, `notifiers: [{type: log}]
policies:
  - {name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 5s, min_runtime: 0s}
  - {name: notify, matchers: ['alertname=~"GPUWasted|GPUOvercommitted"'], action: notify}
`))
	require.NoError(t, s.StartPrometheus(ctx))

	r := su.waitState("idle-d", pod("lab", "idle-d"), "done", 90*time.Second)
	require.Equal(t, config.ActionEvict, r.Action)
	su.waitPodGone(t, "lab", "idle-d")
	su.timing("dcgm source: idle pod → evicted", su.started, r.Warning.At, time.Now())

	// Prometheus has scraped for a while: it holds dcgm-exporter's series
	// and the units made of them, and none of gpureclaim's exporter's.
	got, err := s.Query(ctx, `{__name__=~"gpureclaim_unit_.+"}`)
	require.NoError(t, err)
	require.Empty(t, got, "no gpureclaim unit series: the source is dcgm-exporter's")
	got, err = s.Query(ctx, names.DCGMFBUsed)
	require.NoError(t, err)
	require.NotEmpty(t, got)

	owners, err := s.Query(ctx, `last_over_time(uuid:gpureclaim_unit_owner_info:dcgm{pod=~"idle-d|mig-d"}[10m])`)
	require.NoError(t, err)
	var claims []string
	for _, o := range owners {
		claims = append(claims, o["claim_namespace"]+"/"+o["claim"])
	}
	sort.Strings(claims)
	require.Equal(t, []string{"lab/idle-d-gpu", "lab/mig-d-gpu"}, claims, "the owners carry their claims, as gpureclaim's exporter gives them")

	m := su.waitState("mig-d", pod("lab", "mig-d"), "done", 60*time.Second)
	require.Equal(t, "mig", m.Target.Kind)
	require.Equal(t, "3g.40gb", m.Target.MIGProfile)
	require.Contains(t, m.Target.UUID, names.DCGMMIGSeparator, "a MIG instance is its GPU and its GPU instance")

	_, reclaimed := su.reclaimOf(pod("lab", "busy-d"))
	require.False(t, reclaimed, "the busy pod is never warned")
	p, err := s.Admin.CoreV1().Pods("lab").Get(ctx, "busy-d", metav1.GetOptions{})
	require.NoError(t, err)
	require.Nil(t, p.DeletionTimestamp)
}
