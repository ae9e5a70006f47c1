package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/slurm"
	"github.com/gpureclaim/gpureclaim/internal/sim/stack"
	"github.com/gpureclaim/gpureclaim/internal/testkit/slurmtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/rules"
)

// The bare-metal Slurm story: a real single-node Slurm whose GRES are the
// simulated node's GPUs, the exporter reading Slurm's allocations, then
// Prometheus, Alertmanager and the reclaimer cancelling through slurmrestd.
// An idle interactive allocation (no process at all) is warned and
// cancelled, an idle requeue-able batch job is requeued where the policy
// says so, a busy job and a kept one are untouched.
func TestEndToEndSlurm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	c := slurmtest.Start(t, "gpu-node-1", 8)
	idle := c.Alloc(t, 1)
	busy := c.Batch(t, 1)
	kept := c.Batch(t, 1, "--comment=gpureclaim:keep")
	batch := c.Batch(t, 1, "--requeue")

	// Which GPU each job got is Slurm's choice: the scenario follows it.
	jobs, err := (&slurm.Reader{Node: c.Node, Bin: c.Bin, Env: c.Env()}).Jobs(ctx)
	require.NoError(t, err)
	gpu := map[string]int{}
	for _, j := range jobs {
		require.Len(t, j.GPUs, 1)
		gpu[j.ID] = j.GPUs[0]
	}
	var sc strings.Builder
	sc.WriteString("node: gpu-node-1\nsystem: dgxh100\ngpus:\n")
	fmt.Fprintf(&sc, "  - {index: %d, sm_active: 0}\n", gpu[idle])
	fmt.Fprintf(&sc, "  - {index: %d, sm_active: 0.8}\n", gpu[busy])
	fmt.Fprintf(&sc, "  - {index: %d, sm_active: 0}\n", gpu[kept])
	fmt.Fprintf(&sc, "  - {index: %d, sm_active: 0}\n", gpu[batch])
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node.yaml"), []byte(sc.String()), 0o644))

	// The reclaimer's scontrol (a requeue) finds the cluster as any Slurm
	// client does.
	t.Setenv("SLURM_CONF", c.Conf)
	rulesFile, err := rules.RenderFile(filepath.Join(tooltest.Root(t), "rules", "demo.yaml"))
	require.NoError(t, err)
	s, err := stack.New(stack.Options{Bin: binDir(t), Dir: dir, Speed: 60, Rules: rulesFile,
		Nodes:        []*stack.Node{{Name: "gpu-node-1", Scenario: filepath.Join(dir, "node.yaml")}},
		ExporterArgs: []string{"--slurm.enabled", "--slurm.bin-dir=" + c.Bin, "--slurm.interval=1s"},
		ExporterEnv:  []string{"SLURM_CONF=" + c.Conf}})
	require.NoError(t, err)
	su := &suite{t: t, s: s, out: t.ArtifactDir()}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"reclaimer", "prometheus", "alertmanager", "exporter-gpu-node-1"} {
				_ = os.WriteFile(filepath.Join(su.out, "slurm-"+name+".log"), []byte(s.Log(name)), 0o644)
			}
			_ = os.WriteFile(filepath.Join(su.out, "slurm-daemons.log"), []byte(c.Logs()), 0o644)
			t.Logf("reclaimer:\n%s", s.Log("reclaimer"))
		}
		s.Stop()
	})
	require.NoError(t, s.StartExporters(ctx))
	su.started = time.Now()
	require.NoError(t, s.StartAlertmanager(ctx))
	require.NoError(t, s.StartReclaimer(ctx, fmt.Sprintf(`slurm:
  url: "unix://%s"
  api_version: %s
  scontrol: %q
notifiers: [{type: log}]
policies:
  - {name: batch, matchers: ['alertname="GPUIdle"', 'slurm_job="%s"'], action: requeue, grace: 5s, min_runtime: 0s}
  - {name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 5s, min_runtime: 0s}
`, c.RestSocket, slurmtest.APIVersion, filepath.Join(c.Bin, "scontrol"), batch)))
	require.NoError(t, s.StartPrometheus(ctx))

	job := func(id string) func(*reclaim.Reclaim) bool {
		return func(r *reclaim.Reclaim) bool { return r.Target.SlurmJob == id }
	}
	r := su.waitState("the idle salloc", job(idle), "done", 90*time.Second)
	require.Equal(t, config.ActionCancel, r.Action)
	require.Equal(t, "Slurm job "+idle+" cancelled", r.Detail)
	require.Eventually(t, func() bool { return c.State(t, idle) == "CANCELLED" }, 10*time.Second, 100*time.Millisecond, "Slurm ended the allocation")
	su.timing("idle salloc → cancelled", su.started, r.Warning.At, time.Now())

	// The policy for the requeue-able batch job requeues it: Slurm queues
	// it again, its GPU goes back to the queue.
	q := su.waitState("the idle batch job", job(batch), "done", 60*time.Second)
	require.Equal(t, config.ActionRequeue, q.Action)
	require.Equal(t, "Slurm job "+batch+" requeued", q.Detail)
	out, err := c.Command(ctx, "scontrol", "-o", "show", "job", batch).Output()
	require.NoError(t, err)
	require.Contains(t, string(out), " Restarts=1 ", "Slurm requeued it once")

	// The exporter sees the GPU free once Slurm has taken it back.
	require.Eventually(t, func() bool {
		owners, err := s.Query(ctx, fmt.Sprintf(`gpureclaim_unit_owner_info{slurm_job=%q}`, idle))
		return err == nil && len(owners) == 0
	}, 30*time.Second, 200*time.Millisecond, "the allocation's GPU is free")

	for _, id := range []string{busy, kept} {
		_, touched := su.reclaimOf(job(id))
		require.False(t, touched, "job %s: never warned", id)
		require.Equal(t, "RUNNING", c.State(t, id))
	}
	held, err := s.Query(ctx, fmt.Sprintf(`gpureclaim_unit_owner_info{slurm_job=%q, keep="true"}`, kept))
	require.NoError(t, err)
	require.Len(t, held, 1, "the kept job holds its GPU, marked keep")
}
