package nvmlsim

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// gpmSample records which unit was sampled and when, in scenario time; the
// metrics between two samples are the unit's signals averaged over the gap.
type gpmSample struct {
	mock.GpmSample
	unit *unit
	at   time.Duration
	ok   bool
}

func (s *Sim) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) {
	s.count("GpmSampleAlloc")
	return &gpmSample{}, nvml.SUCCESS
}

func (s *Sim) GpmSampleFree(nvml.GpmSample) nvml.Return {
	s.count("GpmSampleFree")
	return nvml.SUCCESS
}

func (s *Sim) GpmQueryDeviceSupport(dev nvml.Device) (nvml.GpmSupport, nvml.Return) {
	s.count("GpmQueryDeviceSupport")
	d, ok := dev.(*device)
	if !ok {
		return nvml.GpmSupport{}, nvml.ERROR_INVALID_ARGUMENT
	}
	if d.lost() {
		return nvml.GpmSupport{}, nvml.ERROR_GPU_IS_LOST
	}
	sup := nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION}
	if d.gpm {
		sup.IsSupportedDevice = 1
	}
	return sup, nvml.SUCCESS
}

func (s *Sim) gpmTake(name string, dev nvml.Device, sample nvml.GpmSample, pick func(*device) *unit) nvml.Return {
	s.count(name)
	d, ok := dev.(*device)
	g, ok2 := sample.(*gpmSample)
	if !ok || !ok2 {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	t, ret := d.check()
	if ret != nvml.SUCCESS {
		return ret
	}
	if !d.gpm {
		return nvml.ERROR_NOT_SUPPORTED
	}
	u := pick(d)
	if u == nil {
		return nvml.ERROR_NOT_FOUND
	}
	*g = gpmSample{unit: u, at: t, ok: true}
	return nvml.SUCCESS
}

func (s *Sim) GpmSampleGet(dev nvml.Device, sample nvml.GpmSample) nvml.Return {
	return s.gpmTake("GpmSampleGet", dev, sample, func(d *device) *unit {
		if len(d.migs) > 0 {
			return nil // the whole GPU is not a unit in MIG mode
		}
		return &d.unit
	})
}

func (s *Sim) GpmMigSampleGet(dev nvml.Device, gi int, sample nvml.GpmSample) nvml.Return {
	return s.gpmTake("GpmMigSampleGet", dev, sample, func(d *device) *unit {
		for _, m := range d.migs {
			if m.giID == gi {
				return &m.unit
			}
		}
		return nil
	})
}

// GpmMetricsGet fills in the metrics between two samples of the same unit,
// as percentages like the driver's.
func (s *Sim) GpmMetricsGet(m *nvml.GpmMetricsGetType) nvml.Return {
	s.count("GpmMetricsGet")
	a, ok1 := m.Sample1.(*gpmSample)
	b, ok2 := m.Sample2.(*gpmSample)
	if !ok1 || !ok2 || !a.ok || !b.ok || a.unit != b.unit || b.at < a.at || m.NumMetrics > uint32(len(m.Metrics)) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	u := a.unit
	for i := uint32(0); i < m.NumMetrics; i++ {
		var v *Value
		switch nvml.GpmMetricId(m.Metrics[i].MetricId) {
		case nvml.GPM_METRIC_SM_UTIL:
			v = &u.cfg.SMActive
		case nvml.GPM_METRIC_SM_OCCUPANCY:
			v = &u.cfg.SMOccupancy
		case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
			v = &u.cfg.TensorActive
		case nvml.GPM_METRIC_DRAM_BW_UTIL:
			v = &u.cfg.DRAMBandwidth
		default:
			m.Metrics[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		m.Metrics[i].Value = u.meanOver(v, a.at, b.at) * 100
		m.Metrics[i].NvmlReturn = uint32(nvml.SUCCESS)
	}
	return nvml.SUCCESS
}
