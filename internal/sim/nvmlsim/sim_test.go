package nvmlsim

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

func demo(t *testing.T, at time.Duration) *Sim {
	t.Helper()
	sc, err := Open("demo")
	require.NoError(t, err)
	sc.Start = t0
	s, err := New(sc, func() time.Time { return t0.Add(at) })
	require.NoError(t, err)
	return s
}

func TestDemoBuilds(t *testing.T) {
	s := demo(t, 20*time.Minute)
	n, ret := s.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, 8, n)

	d4, _ := s.DeviceGetHandleByIndex(4)
	cur, _, ret := d4.GetMigMode()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, nvml.DEVICE_MIG_ENABLE, cur)
	var profiles []string
	for i := 0; ; i++ {
		m, ret := d4.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			break
		}
		a, _ := m.GetAttributes()
		profiles = append(profiles, (m.(*migDevice)).name)
		require.NotZero(t, a.MemorySizeMB)
	}
	require.Equal(t, []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, profiles)

	d2, _ := s.DeviceGetHandleByIndex(2)
	u, _ := d2.GetUtilizationRates()
	require.EqualValues(t, 0, u.Gpu, "the notebook went idle at 5m")
	mem, _ := d2.GetMemoryInfo()
	require.EqualValues(t, 30<<30, mem.Used)

	d5, _ := s.DeviceGetHandleByIndex(5)
	procs, _ := d5.GetComputeRunningProcesses()
	require.Len(t, procs, 1, "the MPS server")
	clients, _ := d5.GetMPSComputeRunningProcesses()
	require.Len(t, clients, 3)
}

func TestGPMAveragesBetweenSamples(t *testing.T) {
	now := t0
	sc, err := Open("demo")
	require.NoError(t, err)
	sc.Start = t0
	s, err := New(sc, func() time.Time { return now })
	require.NoError(t, err)
	d2, _ := s.DeviceGetHandleByIndex(2)
	a, _ := s.GpmSampleAlloc()
	b, _ := s.GpmSampleAlloc()
	now = t0.Add(4 * time.Minute)
	require.Equal(t, nvml.SUCCESS, s.GpmSampleGet(d2, a))
	now = t0.Add(6 * time.Minute)
	require.Equal(t, nvml.SUCCESS, s.GpmSampleGet(d2, b))
	m := &nvml.GpmMetricsGetType{NumMetrics: 2, Sample1: a, Sample2: b}
	m.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	m.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_NVLINK_L0_RX_PER_SEC)
	require.Equal(t, nvml.SUCCESS, s.GpmMetricsGet(m))
	require.InDelta(t, 20.5, m.Metrics[0].Value, 0.01, "half of the gap at 41%, half at 0")
	require.EqualValues(t, nvml.ERROR_NOT_SUPPORTED, m.Metrics[1].NvmlReturn)
}

func TestKillLeavesTheGPU(t *testing.T) {
	s := demo(t, 20*time.Minute)
	dir := t.TempDir()
	procRoot, _, err := s.WriteFS(dir)
	require.NoError(t, err)
	require.DirExists(t, procRoot+"/61234")
	require.True(t, s.Kill(61234))
	require.False(t, s.Kill(61234), "a second kill finds nothing")
	require.NoDirExists(t, procRoot+"/61234")
	d2, _ := s.DeviceGetHandleByIndex(2)
	procs, _ := d2.GetComputeRunningProcesses()
	require.Empty(t, procs)
	mem, _ := d2.GetMemoryInfo()
	require.Zero(t, mem.Used)
}

func TestLostGPU(t *testing.T) {
	sc, err := Parse([]byte(`
node: n1
system: dgxa100
gpus:
  - index: 3
    lost_after: 1m
`), ".")
	require.NoError(t, err)
	now := t0
	s, err := New(sc, func() time.Time { return now })
	require.NoError(t, err)
	d, _ := s.DeviceGetHandleByIndex(3)
	_, ret := d.GetMemoryInfo()
	require.Equal(t, nvml.SUCCESS, ret)
	now = t0.Add(2 * time.Minute)
	_, ret = d.GetMemoryInfo()
	require.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
	uuid, ret := d.GetUUID()
	require.Equal(t, nvml.SUCCESS, ret, "the handle keeps its identity")
	require.NotEmpty(t, uuid)
}
