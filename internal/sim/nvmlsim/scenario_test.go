package nvmlsim

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/trace"

	"github.com/stretchr/testify/require"
)

func TestBadScenariosNameTheField(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown system", "node: n\nsystem: dgx-1\n", `system: "dgx-1" is not one of [dgxa100 dgxh100 dgxh200]`},
		{"no node", "system: dgxh100\n", "node: is required"},
		{"unknown field", "node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_activ: 0.5}]\n", "field sm_activ not found"},
		{"unknown field in a value", "node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_active: {square: {hi: 1}}}]\n", "field hi not found in square"},
		{"index out of range", "node: n\nsystem: dgxh100\ngpus: [{index: 8}]\n", "gpus[0].index: 8 is out of range: dgxh100 has GPUs 0-7"},
		{"duplicate GPU", "node: n\nsystem: dgxh100\ngpus: [{index: 1}, {index: 1}]\n", "gpus[1].index: GPU 1 is listed twice"},
		{"ratio above 1", "node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_active: 1.5}]\n", "gpus[0].sm_active: values must lie between 0 and 1, got 1.5 to 1.5"},
		{"percent above 100", "node: n\nsystem: dgxh100\ngpus: [{index: 0, utilization: 120%}]\n", "gpus[0].utilization: values must lie between 0 and 1"},
		{"not a number", "node: n\nsystem: dgxh100\ngpus: [{index: 0, memory_used: lots}]\n", `"lots" is not a number, a percentage or a byte size`},
		{"memory above the GPU", "node: n\nsystem: dgxh100\ngpus: [{index: 0, memory_used: 81GiB}]\n", "gpus[0].memory_used: values must lie between 0GiB and 80GiB, got 81GiB to 81GiB"},
		{"bad profile", "node: n\nsystem: dgxh100\ngpus: [{index: 4, mig: [{profile: 2g.30gb}]}]\n", `gpus[0].mig[0].profile: "2g.30gb" is not a MIG profile of NVIDIA H100 80GB HBM3 (have 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, 1g.10gb+me, 1g.20gb)`},
		{"too many slices", "node: n\nsystem: dgxh100\ngpus: [{index: 4, mig: [{profile: 4g.40gb}, {profile: 4g.40gb}]}]\n", "gpus[0].mig: the instances need 8 compute slices; a GPU has 7"},
		{"MIG GPU with a process", "node: n\nsystem: dgxh100\ngpus: [{index: 4, processes: [{pid: 5}], mig: [{profile: 1g.10gb}]}]\n", "gpus[0]: a GPU in MIG mode is used through its instances"},
		{"unknown pod", "node: n\nsystem: dgxh100\ngpus: [{index: 0, pods: [ghost]}]\n", `gpus[0].pods[0]: pod "ghost" is not in pods`},
		{"process in a pod that is not in pods", "node: n\nsystem: dgxh100\npods: [{name: p}]\ngpus: [{index: 0, processes: [{pid: 5, pod: q}]}]\n", `gpus[0].processes[0].pod: pod "q" is not in pods`},
		{"duplicate pid", "node: n\nsystem: dgxh100\ngpus: [{index: 0, processes: [{pid: 5}]}, {index: 1, processes: [{pid: 5}]}]\n", "gpus[1].processes[0].pid: 5 is also used by gpus[0].processes[0]"},
		{"pid 1", "node: n\nsystem: dgxh100\ngpus: [{index: 0, processes: [{pid: 1}]}]\n", "gpus[0].processes[0].pid: 1 is not a PID a workload can have"},
		{"unknown user", "node: n\nsystem: dgxh100\ngpus: [{index: 0, processes: [{pid: 5, user: eve}]}]\n", `gpus[0].processes[0].user: "eve" is not in users`},
		{"bad slurm job", "node: n\nsystem: dgxh100\ngpus: [{index: 0, processes: [{pid: 5, slurm_job: abc}]}]\n", `gpus[0].processes[0].slurm_job: "abc" is not a Slurm job id`},
		{"gpm on ampere", "node: n\nsystem: dgxa100\ngpus: [{index: 0, gpm: true}]\n", "gpus[0].gpm: Mock NVIDIA A100-SXM4-40GB GPUs do not support GPM"},
		{"bad duration", "node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_active: {square: {high: 1, low: 0, period: soon, high_for: 1m}}}]\n", `"soon" is not a duration`},
		{"steps out of order", "node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_active: {steps: {points: [{at: 5m, value: 1}, {at: 1m, value: 0}]}}}]\n", "steps.points[1].at must be later than the point before it"},
		{"two forms", "node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_active: {steps: {points: [{at: 0s, value: 1}]}, square: {period: 1m}}}]\n", "exactly one of steps, square, checkpoint, trace"},
		{"missing trace", "node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_active: {trace: {file: nope.csv, pod: x}}}]\n", "gpus[0].sm_active: trace.file: open nope.csv"},
		{"mps without clients", "node: n\nsystem: dgxh100\ngpus: [{index: 0, mps: true}]\n", "gpus[0].mps: an MPS GPU needs client processes"},
		{"mig_enabled with instances", "node: n\nsystem: dgxh100\ngpus: [{index: 4, mig_enabled: true, mig: [{profile: 1g.10gb}]}]\n", "gpus[0].mig_enabled: is for a GPU in MIG mode without instances"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), ".")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestSignals(t *testing.T) {
	parse := func(y string) Signal {
		t.Helper()
		sc, err := Parse([]byte("node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_active: "+y+"}]\n"), ".")
		require.NoError(t, err)
		return sc.GPUs[0].SMActive.Signal
	}
	square := parse("{square: {high: 0.9, low: 0.1, period: 10m, high_for: 4m}}")
	require.Equal(t, 0.9, square.At(0))
	require.Equal(t, 0.1, square.At(4*time.Minute))
	require.Equal(t, 0.9, square.At(10*time.Minute))
	cp := parse("{checkpoint: {busy: 0.9, idle: 0.05, every: 30m, stall: 3m}}")
	require.Equal(t, 0.9, cp.At(26*time.Minute))
	require.Equal(t, 0.05, cp.At(28*time.Minute))
	require.Equal(t, 0.9, cp.At(31*time.Minute))
	steps := parse("{steps: {points: [{at: 0s, value: 50%}, {at: 10m, value: 0}], repeat: 15m}}")
	require.Equal(t, 0.5, steps.At(9*time.Minute))
	require.Equal(t, 0.0, steps.At(12*time.Minute))
	require.Equal(t, 0.5, steps.At(16*time.Minute))
}

func TestTraceReplay(t *testing.T) {
	dir := t.TempDir()
	csv := "timestamp,pod,gpu_duty_cycle_percent,gpu_memory_used_bytes\n" +
		"600,w,50,100\n660,w,,200\n720,w,0,300\n600,v,10,5\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "t.csv"), []byte(csv), 0o644))
	sc, err := Parse([]byte(`
node: n
system: dgxh100
gpus:
  - index: 0
    sm_active: {trace: {file: t.csv, pod: w}}
    memory_used: {trace: {file: t.csv, pod: w, column: memory, speed: 2}}
`), dir)
	require.NoError(t, err)
	u := sc.GPUs[0]
	require.Equal(t, 0.5, u.SMActive.At(0))
	require.Equal(t, 0.5, u.SMActive.At(90*time.Second), "a missing sample repeats the last one")
	require.Equal(t, 0.0, u.SMActive.At(2*time.Minute))
	require.Equal(t, 0.0, u.SMActive.At(time.Hour), "the last value holds")
	require.Equal(t, 300.0, u.MemoryUsed.At(time.Minute), "twice as fast")

	_, err = Parse([]byte("node: n\nsystem: dgxh100\ngpus: [{index: 0, sm_active: {trace: {file: t.csv, pod: nope}}}]\n"), dir)
	require.ErrorContains(t, err, `trace.pod "nope" is not in t.csv`)
}

func TestSharedTraceLoads(t *testing.T) {
	tr, err := trace.Load("../../../traces/genai-pods.csv.gz")
	require.NoError(t, err)
	require.Len(t, tr.Workloads(), 99)
	require.Equal(t, 57*time.Second, tr.Step)
	require.Equal(t, 1441, len(tr.Duty[tr.Workloads()[0]]), "22.8 hours, a sample every 57 s")
}
