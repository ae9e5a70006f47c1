package sampler

import (
	"errors"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPM metrics are rates between two samples. Each unit keeps two sample
// buffers and alternates them, so every cycle yields the metrics since the
// cycle before without waiting inside a cycle.
type gpmKey struct {
	gpu string
	gi  int // -1 for a whole GPU
}

type gpmState struct {
	samples [2]nvml.GpmSample
	next    int
	prevOK  bool
	prevAt  time.Time
}

var gpmMetricIDs = []nvml.GpmMetricId{
	nvml.GPM_METRIC_SM_UTIL,
	nvml.GPM_METRIC_SM_OCCUPANCY,
	nvml.GPM_METRIC_DRAM_BW_UTIL,
	nvml.GPM_METRIC_ANY_TENSOR_UTIL,
}

func (c *cycle) gpmValues(dev nvml.Device, g *GPU) error {
	lib := c.s.cfg.NVML
	supported, known := c.s.gpmSupport[g.UUID]
	if !known {
		sup, ret := lib.GpmQueryDeviceSupport(dev)
		if err := c.check("nvmlGpmQueryDeviceSupport", g.UUID, ret); err != nil && !errors.Is(err, errNotSupported) {
			return err
		}
		supported = ret == nvml.SUCCESS && sup.IsSupportedDevice != 0
		c.s.gpmSupport[g.UUID] = supported
		if !supported {
			c.s.cfg.Logger.Info("GPM is not supported: SM activity, occupancy and DRAM bandwidth are not exported; rules fall back to utilization", "gpu", g.UUID)
		}
	}
	g.GPMSupported = supported
	if !supported {
		return nil
	}
	var errs []error
	for i := range g.Units {
		u := &g.Units[i]
		key := gpmKey{gpu: g.UUID, gi: -1}
		if u.MIG != nil {
			key.gi = u.MIG.GPUInstanceID
		}
		if err := c.gpmUnit(dev, key, u); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *cycle) gpmUnit(dev nvml.Device, key gpmKey, u *Unit) error {
	lib := c.s.cfg.NVML
	c.seen[key] = true
	st := c.s.gpm[key]
	if st == nil {
		st = &gpmState{}
		for i := range st.samples {
			s, ret := lib.GpmSampleAlloc()
			if err := c.check("nvmlGpmSampleAlloc", u.UUID, ret); err != nil {
				c.freeGPM(st)
				return err
			}
			st.samples[i] = s
		}
		c.s.gpm[key] = st
	}
	cur := st.samples[st.next]
	var ret nvml.Return
	call := "nvmlGpmSampleGet"
	if key.gi >= 0 {
		call = "nvmlGpmMigSampleGet"
		ret = lib.GpmMigSampleGet(dev, key.gi, cur)
	} else {
		ret = lib.GpmSampleGet(dev, cur)
	}
	if err := c.check(call, u.UUID, ret); err != nil {
		st.prevOK = false
		return err
	}
	var err error
	if st.prevOK && c.now.Sub(st.prevAt) >= MinGPMGap {
		err = c.gpmMetrics(st.samples[1-st.next], cur, u)
	}
	st.prevOK, st.prevAt, st.next = true, c.now, 1-st.next
	return err
}

func (c *cycle) gpmMetrics(prev, cur nvml.GpmSample, u *Unit) error {
	m := c.s.gpmMetrics
	m.NumMetrics, m.Sample1, m.Sample2 = uint32(len(gpmMetricIDs)), prev, cur
	for i, id := range gpmMetricIDs {
		m.Metrics[i] = nvml.GpmMetric{MetricId: uint32(id)}
	}
	if err := c.check("nvmlGpmMetricsGet", u.UUID, c.s.cfg.NVML.GpmMetricsGet(m)); err != nil {
		return err
	}
	for i := range gpmMetricIDs {
		r := m.Metrics[i]
		if nvml.Return(r.NvmlReturn) != nvml.SUCCESS {
			continue
		}
		v := some(clamp01(r.Value / 100))
		switch nvml.GpmMetricId(r.MetricId) {
		case nvml.GPM_METRIC_SM_UTIL:
			u.SMActive = v
		case nvml.GPM_METRIC_SM_OCCUPANCY:
			u.SMOccupancy = v
		case nvml.GPM_METRIC_DRAM_BW_UTIL:
			u.DRAMBandwidth = v
		case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
			u.TensorActive = v
		}
	}
	return nil
}

// freeStaleGPM frees the samples of units that are gone (a MIG layout
// changed, a GPU was lost).
func (c *cycle) freeStaleGPM() {
	for key, st := range c.s.gpm {
		if !c.seen[key] {
			c.freeGPM(st)
			delete(c.s.gpm, key)
		}
	}
}

func (c *cycle) freeGPM(st *gpmState) {
	for _, s := range st.samples {
		if s != nil {
			_ = c.s.cfg.NVML.GpmSampleFree(s) // a buffer the driver would not free is nothing to retry
		}
	}
}

func clamp01(f float64) float64 {
	if f < 0 {
		return 0
	}
	if f > 1 {
		return 1
	}
	return f
}
