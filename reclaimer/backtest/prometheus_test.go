package backtest_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/backtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

type series struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// export is what /api/v1/query_range answers for backtest.ExportQuery.
func export(t *testing.T, steps int, ss ...series) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": ss}})
	require.NoError(t, err)
	return string(b)
}

func sampled(metric map[string]string, steps int, f func(i int) (float64, bool)) series {
	s := series{Metric: metric}
	for i := range steps {
		if v, ok := f(i); ok {
			s.Values = append(s.Values, [2]any{float64(start.Unix() + int64(60*i)), fmt.Sprint(v)})
		}
	}
	return s
}

func always(v float64) func(int) (float64, bool) { return func(int) (float64, bool) { return v, true } }

func unit(name, uuid string, extra ...string) map[string]string {
	m := map[string]string{"__name__": name, "uuid": uuid, "gpu_uuid": uuid, "job": "gpureclaim-exporter", "instance": "gpu-node-1:9847"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// A Prometheus export of two units: a notebook pod that goes idle after
// half an hour (SM activity, from GPM) and a Slurm job on bare metal that
// stays busy (utilization only, no GPM).
func TestFromPrometheus(t *testing.T) {
	t.Parallel()
	const steps = 240
	js := export(t, steps,
		sampled(unit("gpureclaim_unit_info", "GPU-a", "node", "gpu-node-1", "kind", "gpu", "model", "H100"), steps, always(1)),
		sampled(unit("gpureclaim_unit_owner_info", "GPU-a", "namespace", "ml", "pod", "nb-0", "container", "main", "keep", "false"), steps, always(1)),
		sampled(unit("gpureclaim_unit_sm_active_ratio", "GPU-a"), steps, func(i int) (float64, bool) {
			if i < 30 {
				return 0.7, true
			}
			return 0, i != 100 // a missed scrape
		}),
		sampled(unit("gpureclaim_unit_memory_used_bytes", "GPU-a"), steps, always(30<<30)),
		sampled(unit("gpureclaim_unit_memory_total_bytes", "GPU-a"), steps, always(80<<30)),
		sampled(unit("gpureclaim_unit_info", "GPU-b", "node", "gpu-node-1", "kind", "gpu", "model", "H100"), steps, always(1)),
		sampled(unit("gpureclaim_unit_owner_info", "GPU-b", "user", "alice", "slurm_job", "42", "keep", "false"), steps, always(1)),
		sampled(unit("gpureclaim_unit_utilization_ratio", "GPU-b"), steps, always(0.95)),
		sampled(unit("gpureclaim_unit_memory_used_bytes", "GPU-b"), steps, always(60<<30)),
		sampled(unit("gpureclaim_unit_memory_total_bytes", "GPU-b"), steps, always(80<<30)),
	)
	h, err := backtest.FromPrometheus(strings.NewReader(js), reclaim.TopOwner{}, false)
	require.NoError(t, err)
	require.Equal(t, start, h.Start)
	require.Equal(t, 60e9, float64(h.Step))
	require.Len(t, h.Workloads, 2)
	alice, nb := h.Workloads[0], h.Workloads[1]
	require.Equal(t, "alice/42", alice.ID)
	require.Equal(t, "alice", alice.Owner)
	require.Equal(t, 0.95, alice.Activity[10], "utilization where the unit has no GPM")
	require.Equal(t, "ml/nb-0", nb.ID)
	require.Equal(t, "ml", nb.Owner)
	require.Equal(t, 0.7, nb.Activity[0])

	res := run(t, h, committedRules, policy(t, ""))
	require.Empty(t, res.Workloads[0].Reclaims, "alice's job is busy")
	require.Len(t, res.Workloads[1].Reclaims, 1)
	require.Equal(t, config.ActionEvict, res.Workloads[1].Reclaims[0].Action, "a bare pod")
	rep := backtest.Summarize(res, 0)
	require.Equal(t, []string{"ml", "alice"}, []string{rep.Owners[0].Name, rep.Owners[1].Name}, "most idle first")
}

func TestFromPrometheusRefusesWhatItCannotReplay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"<html>", "not a query_range answer"},
		{`{"status":"error","error":"query timed out"}`, "the query failed: query timed out"},
		{`{"status":"success","data":{"resultType":"vector","result":[]}}`, `result type "vector", want matrix`},
		{`{"status":"success","data":{"resultType":"matrix","result":[]}}`, "no series"},
		{`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"up"},"values":[]}]}}`, "no samples"},
		{export(t, 2, sampled(dcgm("DCGM_FI_DEV_FB_USED", "0", "GPU-a"), 2, always(1))), "no dcgm-exporter series names a pod"},
		{export(t, 2, sampled(unit("gpureclaim_unit_info", "GPU-a"), 2, always(1))), "no gpureclaim_unit_owner_info series"},
		{`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}`, "invalid syntax"},
	} {
		_, err := backtest.FromPrometheus(strings.NewReader(tc.in), reclaim.TopOwner{}, false)
		require.ErrorContains(t, err, tc.want, tc.in)
	}
}

// dcgm is one of dcgm-exporter's series as a ServiceMonitor without
// honorLabels scrapes it: the target's pod labels, the mapping's exported_*.
func dcgm(field, gpu, uuid string, extra ...string) map[string]string {
	m := map[string]string{"__name__": field, "gpu": gpu, "UUID": uuid, "device": "nvidia" + gpu, "modelName": "NVIDIA H100 80GB HBM3",
		"Hostname": "gpu-node-1", "job": "nvidia-dcgm-exporter", "instance": "10.0.0.5:9400",
		"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "container": "nvidia-dcgm-exporter"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// An export of dcgm-exporter's series, replayed through the rules for
// source: dcgm: a notebook's MIG instance that goes idle after half an
// hour, a serving pod's whole GPU that stays busy (utilization only, no
// profiling), and a GPU no pod holds.
func TestFromPrometheusDCGM(t *testing.T) {
	t.Parallel()
	const steps = 240
	nb := []string{"GPU_I_ID", "3", "GPU_I_PROFILE", "3g.40gb", "exported_namespace", "ml", "exported_pod", "nb-0", "exported_container", "notebook"}
	srv := []string{"exported_namespace", "serving", "exported_pod", "llm-0", "exported_container", "server"}
	js := export(t, steps,
		sampled(dcgm("DCGM_FI_PROF_SM_ACTIVE", "0", "GPU-a", nb...), steps, func(i int) (float64, bool) {
			if i < 30 {
				return 0.7, true
			}
			return 0, true
		}),
		sampled(dcgm("DCGM_FI_DEV_FB_USED", "0", "GPU-a", nb...), steps, always(20000)),
		sampled(dcgm("DCGM_FI_DEV_FB_FREE", "0", "GPU-a", nb...), steps, always(20000)),
		sampled(dcgm("DCGM_FI_DEV_GPU_UTIL", "1", "GPU-b", srv...), steps, always(95)),
		sampled(dcgm("DCGM_FI_DEV_FB_USED", "1", "GPU-b", srv...), steps, always(60000)),
		sampled(dcgm("DCGM_FI_DEV_FB_FREE", "1", "GPU-b", srv...), steps, always(20000)),
		sampled(dcgm("DCGM_FI_DEV_FB_USED", "2", "GPU-c"), steps, always(0)),
	)
	h, err := backtest.FromPrometheus(strings.NewReader(js), reclaim.TopOwner{}, false)
	require.NoError(t, err)
	require.Len(t, h.Workloads, 2, "the GPU no pod holds is no workload")
	nbw, llm := h.Workloads[0], h.Workloads[1]
	require.Equal(t, "ml/nb-0", nbw.ID)
	require.Equal(t, 0.7, nbw.Activity[0])
	require.Equal(t, float64(20000<<20), nbw.Memory[0], "MiB to bytes")
	require.Equal(t, "serving/llm-0", llm.ID)
	require.InDelta(t, 0.95, llm.Activity[0], 1e-9, "utilization in percent, as a ratio")

	res := run(t, h, "../../rules/gpureclaim-dcgm.rules.yml", policy(t, ""))
	require.Len(t, res.Workloads[0].Reclaims, 1, "the idle notebook")
	require.Equal(t, config.ActionEvict, res.Workloads[0].Reclaims[0].Action, "a bare pod: evicted, never killed")
	require.Empty(t, res.Workloads[1].Reclaims, "the busy server")

	// Scraped with honor_labels, pod is the mapping's.
	m := dcgm("DCGM_FI_DEV_FB_USED", "0", "GPU-a", "namespace", "ml", "pod", "nb-0")
	delete(m, "container")
	honored := export(t, steps, sampled(m, steps, always(1)))
	h, err = backtest.FromPrometheus(strings.NewReader(honored), reclaim.TopOwner{}, true)
	require.NoError(t, err)
	require.Equal(t, "ml/nb-0", h.Workloads[0].ID)
}
