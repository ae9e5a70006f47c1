package nvmlsim

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// unit is the simulated state of a whole GPU or a MIG instance.
type unit struct {
	sim      *Sim
	uuid     string
	cfg      *Unit
	memTotal uint64
	mps      bool
}

// procs returns the processes of the unit that are still running.
func (u *unit) procs() []*Process {
	u.sim.mu.Lock()
	defer u.sim.mu.Unlock()
	var out []*Process
	for i := range u.cfg.Processes {
		p := &u.cfg.Processes[i]
		if !u.sim.killed[p.PID] && !u.sim.removedPods[p.Pod] {
			out = append(out, p)
		}
	}
	return out
}

// vacated says whether every process the scenario put on the unit is gone:
// then it reads as a free unit, whatever the scenario says of its activity.
func (u *unit) vacated() bool {
	return len(u.cfg.Processes) > 0 && len(u.procs()) == 0
}

func (u *unit) at(v *Value, t time.Duration) float64 {
	if u.vacated() {
		return 0
	}
	return clamp01(signalAt(v, t))
}

func (u *unit) meanOver(v *Value, from, to time.Duration) float64 {
	if u.vacated() {
		return 0
	}
	return clamp01(mean(v, from, to))
}

func (u *unit) memoryUsed(t time.Duration) uint64 {
	if u.vacated() {
		return 0
	}
	if u.cfg.MemoryUsed.IsSet() {
		return min(u.memTotal, uint64(u.cfg.MemoryUsed.At(t)))
	}
	var sum uint64
	for _, p := range u.procs() {
		sum += uint64(signalAt(&p.MemoryUsed, t))
	}
	return min(u.memTotal, sum)
}

// processInfos lists the unit's compute processes, or its graphics ones.
func (u *unit) processInfos(t time.Duration, gi, ci uint32, graphics bool) []nvml.ProcessInfo {
	var out []nvml.ProcessInfo
	for _, p := range u.procs() {
		if p.Graphics == graphics {
			out = append(out, nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: uint64(signalAt(&p.MemoryUsed, t)), GpuInstanceId: gi, ComputeInstanceId: ci})
		}
	}
	return out
}

// device is a simulated whole GPU on top of a mock server device.
type device struct {
	*server.Device
	sim  *Sim
	cfg  *GPU
	uuid string
	unit unit
	migs []*migDevice
	gpm  bool

	energyMu sync.Mutex
	energyJ  float64
	energyT  time.Duration
}

var _ nvml.Device = (*device)(nil)

// mpsServerPID is the simulated MPS control daemon's server process.
func mpsServerPID(index int) int { return 90000 + index }

func newDevice(s *Sim, d *server.Device, g *GPU) (*device, error) {
	d.UUID = g.UUID
	dev := &device{Device: d, sim: s, cfg: g, uuid: g.UUID, gpm: s.sys.gpm}
	if g.GPM != nil {
		dev.gpm = *g.GPM
	}
	dev.unit = unit{sim: s, uuid: g.UUID, cfg: &g.Unit, memTotal: d.Config.MemoryMB << 20, mps: g.MPS}
	if g.Minor != nil {
		d.Minor = *g.Minor
	}
	if !dev.migOn() {
		return dev, nil
	}
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("enabling MIG: %v", ret)
	}
	var used []nvml.GpuInstancePlacement
	for j := range g.MIG {
		m := &g.MIG[j]
		info, _ := s.sys.profile(m.Profile)
		// The first free placement, as nvidia-smi mig -cgi picks one.
		possible, _ := d.GetGpuInstancePossiblePlacements(&info)
		placement, ok := freePlacement(possible, used)
		if !ok {
			return nil, fmt.Errorf("mig[%d]: no free placement for %s", j, m.Profile)
		}
		used = append(used, placement)
		gi, ret := d.CreateGpuInstanceWithPlacement(&info, &placement)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("mig[%d]: creating GPU instance: %v", j, ret)
		}
		ciID, err := computeProfileID(info.SliceCount)
		if err != nil {
			return nil, fmt.Errorf("mig[%d]: %w", j, err)
		}
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("mig[%d]: compute-instance profile: %v", j, ret)
		}
		ci, ret := gi.CreateComputeInstance(&ciInfo)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("mig[%d]: creating compute instance: %v", j, ret)
		}
		giInfo, _ := gi.GetInfo()
		ciI, _ := ci.GetInfo()
		md := &migDevice{
			parent:    dev,
			giID:      int(giInfo.Id),
			ciID:      int(ciI.Id),
			profile:   info,
			placement: placement,
			name:      m.Profile,
			uuid:      "MIG-" + stableUUID(s.sc.Node, "mig", g.UUID, fmt.Sprint(giInfo.Id), fmt.Sprint(ciI.Id)),
		}
		md.unit = unit{sim: s, uuid: md.uuid, cfg: &m.Unit, memTotal: info.MemorySizeMB << 20}
		dev.migs = append(dev.migs, md)
	}
	sort.Slice(dev.migs, func(a, b int) bool { return dev.migs[a].giID < dev.migs[b].giID })
	return dev, nil
}

// freePlacement is the first placement that overlaps none in use.
func freePlacement(possible, used []nvml.GpuInstancePlacement) (nvml.GpuInstancePlacement, bool) {
next:
	for _, p := range possible {
		for _, u := range used {
			if p.Start < u.Start+u.Size && u.Start < p.Start+p.Size {
				continue next
			}
		}
		return p, true
	}
	return nvml.GpuInstancePlacement{}, false
}

// GetGpuInstanceById finds a GPU instance, as NVML does by its id.
func (d *device) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	if _, ret := d.call("DeviceGetGpuInstanceById"); ret != nvml.SUCCESS {
		return nil, ret
	}
	d.RLock()
	defer d.RUnlock()
	for gi := range d.GpuInstances {
		if int(gi.Info.Id) == id {
			return gi, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// migOn says whether the GPU is in MIG mode, with instances or without.
func (d *device) migOn() bool { return len(d.cfg.MIG) > 0 || d.cfg.MIGEnabled }

func (d *device) units() []*unit {
	if len(d.migs) == 0 {
		return []*unit{&d.unit}
	}
	out := make([]*unit, len(d.migs))
	for i, m := range d.migs {
		out[i] = &m.unit
	}
	return out
}

// lost says whether the GPU has fallen off the bus (ERROR_GPU_IS_LOST).
func (d *device) lost() bool {
	return d.cfg.LostAfter != nil && d.sim.elapsed() >= time.Duration(*d.cfg.LostAfter)
}

// call counts an NVML call and says whether it fails because the GPU is lost.
func (d *device) call(name string) (time.Duration, nvml.Return) {
	d.sim.count(name)
	return d.check()
}

// check returns the scenario time, or ERROR_GPU_IS_LOST.
func (d *device) check() (time.Duration, nvml.Return) {
	if d.lost() {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	return d.sim.elapsed(), nvml.SUCCESS
}

func (d *device) GetUUID() (string, nvml.Return) {
	d.sim.count("DeviceGetUUID")
	return d.uuid, nvml.SUCCESS
}

func (d *device) GetIndex() (int, nvml.Return) {
	d.sim.count("DeviceGetIndex")
	return d.cfg.Index, nvml.SUCCESS
}

func (d *device) GetName() (string, nvml.Return) {
	if _, ret := d.call("DeviceGetName"); ret != nvml.SUCCESS {
		return "", ret
	}
	return d.Config.Name, nvml.SUCCESS
}

func (d *device) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	if _, ret := d.call("DeviceGetPciInfo"); ret != nvml.SUCCESS {
		return nvml.PciInfo{}, ret
	}
	p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Bus: uint32(0x18 + d.cfg.Index)}
	id := fmt.Sprintf("00000000:%02X:00.0", p.Bus)
	for i := 0; i < len(id); i++ {
		p.BusId[i] = int8(id[i])
	}
	return p, nvml.SUCCESS
}

func (d *device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	t, ret := d.call("DeviceGetMemoryInfo")
	if ret != nvml.SUCCESS {
		return nvml.Memory{}, ret
	}
	total := d.Config.MemoryMB << 20
	var used uint64
	for _, u := range d.units() {
		used += u.memoryUsed(t)
	}
	used = min(used, total)
	return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
}

func (d *device) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	t, ret := d.call("DeviceGetUtilizationRates")
	if ret != nvml.SUCCESS {
		return nvml.Utilization{}, ret
	}
	if d.migOn() {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.Utilization{
		Gpu:    uint32(d.unit.at(&d.unit.cfg.Utilization, t)*100 + 0.5),
		Memory: uint32(d.unit.at(&d.unit.cfg.MemoryController, t)*100 + 0.5),
	}, nvml.SUCCESS
}

func (d *device) power(t time.Duration) float64 {
	if d.cfg.PowerWatts.IsSet() {
		return d.cfg.PowerWatts.At(t)
	}
	// An idle H100 draws about 70 W; work adds up to its 700 W limit.
	act := 0.0
	for _, u := range d.units() {
		act += u.at(&u.cfg.SMActive, t) * float64(u.memTotal) / float64(d.Config.MemoryMB<<20)
	}
	return 70 + 630*clamp01(act)
}

func (d *device) GetPowerUsage() (uint32, nvml.Return) {
	t, ret := d.call("DeviceGetPowerUsage")
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	return uint32(d.power(t) * 1000), nvml.SUCCESS
}

func (d *device) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	t, ret := d.call("DeviceGetTotalEnergyConsumption")
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	d.energyMu.Lock()
	defer d.energyMu.Unlock()
	if d.energyJ == 0 {
		// The counter runs since the driver loaded, a day before time 0.
		d.energyJ, d.energyT = d.power(0)*86400, 0
	}
	if t > d.energyT {
		d.energyJ += (d.power(d.energyT) + d.power(t)) / 2 * (t - d.energyT).Seconds()
		d.energyT = t
	}
	return uint64(d.energyJ * 1000), nvml.SUCCESS
}

func (d *device) GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return) {
	t, ret := d.call("DeviceGetTemperature")
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	if d.cfg.TemperatureCelsius.IsSet() {
		return uint32(d.cfg.TemperatureCelsius.At(t)), nvml.SUCCESS
	}
	return uint32(30 + d.power(t)/700*45), nvml.SUCCESS
}

func (d *device) GetComputeMode() (nvml.ComputeMode, nvml.Return) {
	if _, ret := d.call("DeviceGetComputeMode"); ret != nvml.SUCCESS {
		return 0, ret
	}
	if d.cfg.MPS {
		return nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, nvml.SUCCESS
	}
	return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS
}

func (d *device) GetMigMode() (int, int, nvml.Return) {
	if _, ret := d.call("DeviceGetMigMode"); ret != nvml.SUCCESS {
		return 0, 0, ret
	}
	cur := nvml.DEVICE_MIG_DISABLE
	if d.migOn() {
		cur = nvml.DEVICE_MIG_ENABLE
	}
	pending := cur
	if d.cfg.MIGPending != nil {
		pending = nvml.DEVICE_MIG_DISABLE
		if *d.cfg.MIGPending {
			pending = nvml.DEVICE_MIG_ENABLE
		}
	}
	return cur, pending, nvml.SUCCESS
}

func (d *device) GetMaxMigDeviceCount() (int, nvml.Return) {
	if _, ret := d.call("DeviceGetMaxMigDeviceCount"); ret != nvml.SUCCESS {
		return 0, ret
	}
	return 7, nvml.SUCCESS
}

func (d *device) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if _, ret := d.call("DeviceGetMigDeviceHandleByIndex"); ret != nvml.SUCCESS {
		return nil, ret
	}
	if i < 0 || i >= len(d.migs) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return d.migs[i], nvml.SUCCESS
}

func (d *device) IsMigDeviceHandle() (bool, nvml.Return) { return false, nvml.SUCCESS }

func (d *device) GetGpuInstanceProfileInfo(id int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	if _, ret := d.call("DeviceGetGpuInstanceProfileInfo"); ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, ret
	}
	return d.Device.GetGpuInstanceProfileInfo(id)
}

func (d *device) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	t, ret := d.call("DeviceGetComputeRunningProcesses")
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return d.processInfos(t, false), nvml.SUCCESS
}

func (d *device) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	t, ret := d.call("DeviceGetGraphicsRunningProcesses")
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return d.processInfos(t, true), nvml.SUCCESS
}

// processInfos lists the compute or the graphics processes of every unit,
// with the instance ids NVML gives (none outside MIG, or on no instance).
func (d *device) processInfos(t time.Duration, graphics bool) []nvml.ProcessInfo {
	const none = 0xFFFFFFFF
	if len(d.migs) > 0 {
		var out []nvml.ProcessInfo
		for _, m := range d.migs {
			out = append(out, m.unit.processInfos(t, uint32(m.giID), uint32(m.ciID), graphics)...)
		}
		return out
	}
	if d.cfg.MPS && !graphics {
		// MPS clients run inside the server's context; NVML lists them apart.
		return []nvml.ProcessInfo{{Pid: uint32(mpsServerPID(d.cfg.Index)), UsedGpuMemory: 32 << 20, GpuInstanceId: none, ComputeInstanceId: none}}
	}
	return d.unit.processInfos(t, none, none, graphics)
}

func (d *device) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	t, ret := d.call("DeviceGetMPSComputeRunningProcesses")
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	if d.cfg.MPSUnsupported {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if !d.cfg.MPS {
		return nil, nvml.SUCCESS
	}
	return d.unit.processInfos(t, 0xFFFFFFFF, 0xFFFFFFFF, false), nvml.SUCCESS
}

// GetProcessUtilization reports each process's share of SM time. Processes
// whose share the scenario gives are reported; a lone process gets the
// whole unit's utilization; an MPS GPU reports its server.
func (d *device) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	t, ret := d.call("DeviceGetProcessUtilization")
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	if d.migOn() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	ts := uint64(d.sim.now().UnixMicro())
	if ts <= lastSeen {
		return nil, nvml.ERROR_NOT_FOUND
	}
	pct := func(f float64) uint32 { return uint32(clamp01(f)*100 + 0.5) }
	var out []nvml.ProcessUtilizationSample
	procs := d.unit.procs()
	switch {
	case d.cfg.MPS:
		out = append(out, nvml.ProcessUtilizationSample{Pid: uint32(mpsServerPID(d.cfg.Index)), TimeStamp: ts, SmUtil: pct(d.unit.at(&d.unit.cfg.Utilization, t))})
	default:
		for _, p := range procs {
			switch {
			case p.SMUtil.IsSet():
				out = append(out, nvml.ProcessUtilizationSample{Pid: uint32(p.PID), TimeStamp: ts, SmUtil: pct(p.SMUtil.At(t))})
			case len(procs) == 1:
				out = append(out, nvml.ProcessUtilizationSample{Pid: uint32(p.PID), TimeStamp: ts, SmUtil: pct(d.unit.at(&d.unit.cfg.Utilization, t))})
			}
		}
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

func (d *device) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	return d.sim.GpmQueryDeviceSupport(d)
}

// migDevice is a MIG device handle: one compute instance of a GPU instance.
type migDevice struct {
	mock.Device
	parent    *device
	unit      unit
	giID      int
	ciID      int
	profile   nvml.GpuInstanceProfileInfo
	placement nvml.GpuInstancePlacement
	name      string
	uuid      string
}

var _ nvml.Device = (*migDevice)(nil)

func (m *migDevice) GetUUID() (string, nvml.Return) {
	m.parent.sim.count("DeviceGetUUID")
	return m.uuid, nvml.SUCCESS
}

func (m *migDevice) GetName() (string, nvml.Return) {
	if _, ret := m.parent.call("DeviceGetName"); ret != nvml.SUCCESS {
		return "", ret
	}
	return fmt.Sprintf("%s MIG %s", m.parent.Config.Name, m.name), nvml.SUCCESS
}

func (m *migDevice) IsMigDeviceHandle() (bool, nvml.Return) { return true, nvml.SUCCESS }

func (m *migDevice) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	return m.parent, nvml.SUCCESS
}

func (m *migDevice) GetGpuInstanceId() (int, nvml.Return) {
	if _, ret := m.parent.call("DeviceGetGpuInstanceId"); ret != nvml.SUCCESS {
		return 0, ret
	}
	return m.giID, nvml.SUCCESS
}

func (m *migDevice) GetComputeInstanceId() (int, nvml.Return) {
	if _, ret := m.parent.call("DeviceGetComputeInstanceId"); ret != nvml.SUCCESS {
		return 0, ret
	}
	return m.ciID, nvml.SUCCESS
}

func (m *migDevice) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	if _, ret := m.parent.call("DeviceGetAttributes"); ret != nvml.SUCCESS {
		return nvml.DeviceAttributes{}, ret
	}
	return nvml.DeviceAttributes{
		MultiprocessorCount:       m.profile.MultiprocessorCount,
		GpuInstanceSliceCount:     m.profile.SliceCount,
		ComputeInstanceSliceCount: m.profile.SliceCount,
		MemorySizeMB:              m.profile.MemorySizeMB,
	}, nvml.SUCCESS
}

func (m *migDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	t, ret := m.parent.call("DeviceGetMemoryInfo")
	if ret != nvml.SUCCESS {
		return nvml.Memory{}, ret
	}
	used := m.unit.memoryUsed(t)
	return nvml.Memory{Total: m.unit.memTotal, Used: used, Free: m.unit.memTotal - used}, nvml.SUCCESS
}

func (m *migDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if _, ret := m.parent.call("DeviceGetUtilizationRates"); ret != nvml.SUCCESS {
		return nvml.Utilization{}, ret
	}
	return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
}

func (m *migDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	t, ret := m.parent.call("DeviceGetComputeRunningProcesses")
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return m.unit.processInfos(t, uint32(m.giID), uint32(m.ciID), false), nvml.SUCCESS
}

func (m *migDevice) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if _, ret := m.parent.call("DeviceGetMPSComputeRunningProcesses"); ret != nvml.SUCCESS {
		return nil, ret
	}
	return nil, nvml.SUCCESS
}

func (m *migDevice) GetProcessUtilization(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if _, ret := m.parent.call("DeviceGetProcessUtilization"); ret != nvml.SUCCESS {
		return nil, ret
	}
	return nil, nvml.ERROR_NOT_SUPPORTED
}
