// Package sampler reads NVML on one interval, in the background, into an
// immutable Snapshot of the node. Scrapes read the latest Snapshot and never
// call NVML, so that several Prometheus replicas do not multiply the load on
// the driver and a slow driver never slows a scrape.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpureclaim/gpureclaim/exporter/slurm"
	"github.com/gpureclaim/gpureclaim/internal/loop"
	"github.com/gpureclaim/gpureclaim/internal/mig"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/procfs"
)

// Step names, reported as the collector label of the health metrics.
const (
	StepDevice       = "device"
	StepMIG          = "mig"
	StepGPM          = "gpm"
	StepProcesses    = "processes"
	StepPodResources = "pod_resources"
	StepPods         = "pods"
	StepSlurm        = "slurm"
)

// Steps lists the steps in the order a sample runs them.
var Steps = []string{StepDevice, StepMIG, StepGPM, StepProcesses, StepPodResources, StepPods, StepSlurm}

// DefaultSlurmInterval is the least time between two reads of Slurm.
const DefaultSlurmInterval = 30 * time.Second

// MinGPMGap is the shortest gap between two GPM samples that NVML accepts.
const MinGPMGap = 100 * time.Millisecond

// AllocationLister says which pods hold which units (the kubelet's pod-resources API).
type AllocationLister interface {
	List(ctx context.Context) (podresources.Allocations, error)
}

// DeviceUUIDReader reads the UUIDs DRA devices publish in the node's
// ResourceSlices (internal/kubeapi).
type DeviceUUIDReader interface {
	DeviceUUIDs(ctx context.Context) (map[podresources.Device]string, error)
}

// DefaultSliceInterval is the least time between two reads of the node's
// ResourceSlices.
const DefaultSliceInterval = time.Minute

// SlurmLister says which Slurm jobs hold which of the node's GPUs by
// allocation (exporter/slurm).
type SlurmLister interface {
	Jobs(ctx context.Context) ([]slurm.Job, error)
	// PendingGPUs counts the GPUs the cluster's pending jobs ask for.
	PendingGPUs(ctx context.Context) (int, error)
}

// Config holds the sampler's dependencies. NVML is required; the rest may be nil.
type Config struct {
	NVML nvml.Interface
	Node string
	// Proc attributes processes to users, pods and Slurm jobs.
	Proc        *procfs.FS
	Allocations AllocationLister
	// Slurm, when set, makes a GPU a Slurm job holds by allocation held,
	// whether or not a process runs on it.
	Slurm SlurmLister
	// SlurmInterval is the least time between two reads of Slurm: each is
	// an RPC to slurmctld from every node. Default DefaultSlurmInterval.
	SlurmInterval time.Duration
	// Slices, when set, resolves a DRA device whose name does not follow
	// its driver's convention through the node's ResourceSlices, read at
	// most every SliceInterval (default DefaultSliceInterval) while one is
	// unknown.
	Slices        DeviceUUIDReader
	SliceInterval time.Duration
	// Pods names the pods of the UIDs in processes' cgroups. Without it a
	// process on a unit several pods share is attributed to none of them.
	// One with an Err method (podmeta.Listed) reports its health as the
	// pods step.
	Pods   podmeta.Resolver
	Clock  func() time.Time
	Logger *slog.Logger
	// OnSample, when set, sees every published snapshot (the action
	// endpoint keeps a short history of activity from it).
	OnSample func(*Snapshot)
}

// Sampler samples NVML into snapshots.
type Sampler struct {
	cfg    Config
	latest atomic.Pointer[Snapshot]

	mu           sync.Mutex // one cycle at a time; guards the state below
	driver       *Driver
	static       map[string]staticInfo
	profiles     map[string][]mig.Profile
	gpm          map[gpmKey]*gpmState
	gpmSupport   map[string]bool
	gpmMetrics   *nvml.GpmMetricsGetType
	procUtilSeen map[string]uint64
	allocs       podresources.Allocations
	// allocsFailing: the last read of the kubelet's pod resources failed.
	allocsFailing bool
	slurmJobs     []slurm.Job
	slurmPending  Gauge
	slurmRead     time.Time
	slurmErr      error
	errors        map[ErrorKey]uint64
	quiet         map[string]bool // not-supported calls already logged
	migState      map[string]string
	causes        map[string]bool // why processes went unattributed, logged once each
	// byIndex is each GPU's last known UUID, so that a GPU whose handle
	// can no longer be had (lost, off the bus) stays visible as down.
	byIndex map[int]string
	lost    map[string]bool // why a GPU was unreadable, logged once each
	// sliceUUIDs are the UUIDs DRA devices publish in the node's
	// ResourceSlices, as last read at slicesRead.
	sliceUUIDs map[podresources.Device]string
	slicesRead time.Time
}

type staticInfo struct {
	model, pciBusID string
	minor           int
}

// New returns a sampler; call Run, or Sample for one cycle.
func New(cfg Config) *Sampler {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SliceInterval == 0 {
		cfg.SliceInterval = DefaultSliceInterval
	}
	return &Sampler{
		cfg:          cfg,
		static:       map[string]staticInfo{},
		profiles:     map[string][]mig.Profile{},
		gpm:          map[gpmKey]*gpmState{},
		gpmSupport:   map[string]bool{},
		gpmMetrics:   &nvml.GpmMetricsGetType{},
		procUtilSeen: map[string]uint64{},
		errors:       map[ErrorKey]uint64{},
		quiet:        map[string]bool{},
		migState:     map[string]string{},
		causes:       map[string]bool{},
		byIndex:      map[int]string{},
		lost:         map[string]bool{},
	}
}

// Latest returns the last published snapshot, nil before the first.
func (s *Sampler) Latest() *Snapshot { return s.latest.Load() }

// Run samples every interval until ctx ends. The first sample is taken at once.
func (s *Sampler) Run(ctx context.Context, interval time.Duration) {
	loop.Every(ctx, interval, func() { s.Sample(ctx) })
}

// cycle is the state of one sampling cycle.
type cycle struct {
	s     *Sampler
	ctx   context.Context
	now   time.Time
	steps map[string]*Step
	seen  map[gpmKey]bool
	dra   map[draKey][]podresources.Container // the kubelet's DRA devices, by the unit they name
	// draByUUID are the kubelet's DRA devices that were resolved through
	// the node's ResourceSlices, by unit UUID.
	draByUUID map[string][]podresources.Container
	// draDevices are the devices behind each key of dra, draUsed the keys
	// a unit matched, draUnresolved the devices no name or slice resolves.
	draDevices    map[draKey][]podresources.Device
	draUsed       map[draKey]bool
	draUnresolved int
}

func (c *cycle) track(step string, start time.Time, err error) {
	st := c.steps[step]
	st.Duration += time.Since(start)
	if err != nil && !errors.Is(err, errNotSupported) {
		st.Success = false
	}
}

// check turns a return code into an error and counts failures. A call the
// GPU does not support is logged once at debug level and is no failure.
func (c *cycle) check(call, uuid string, ret nvml.Return) error {
	switch ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_NOT_SUPPORTED:
		if k := call + "/" + uuid; !c.s.quiet[k] {
			c.s.quiet[k] = true
			c.s.cfg.Logger.Debug("NVML call not supported", "call", call, "uuid", uuid)
		}
		return errNotSupported
	}
	c.s.errors[ErrorKey{Call: call, UUID: uuid, Error: retName(ret)}]++
	return &nvmlError{call: call, ret: ret}
}

// Sample runs one cycle and publishes its snapshot.
func (s *Sampler) Sample(ctx context.Context) *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &cycle{s: s, ctx: ctx, now: s.cfg.Clock(), steps: map[string]*Step{}, seen: map[gpmKey]bool{}, draUsed: map[draKey]bool{}}
	for _, name := range Steps {
		c.steps[name] = &Step{Name: name, Success: true}
	}
	snap := &Snapshot{Time: c.now, Node: s.cfg.Node}

	c.podResources()
	if l, ok := s.cfg.Pods.(interface{ Err() error }); ok {
		c.track(StepPods, time.Now(), l.Err())
	}
	c.slurm()
	snap.SlurmJobs, snap.SlurmPendingGPUs = s.slurmJobs, s.slurmPending
	start := time.Now()
	if s.driver == nil {
		s.driver = c.driverInfo()
	}
	if s.driver != nil {
		snap.Driver = *s.driver
	}
	n, ret := s.cfg.NVML.DeviceGetCount()
	c.track(StepDevice, start, c.check("nvmlDeviceGetCount", "", ret))
	for i := 0; i < n; i++ {
		snap.GPUs = append(snap.GPUs, c.gpu(i))
	}
	c.freeStaleGPM()
	if s.cfg.Allocations != nil {
		snap.DRAUnresolved = some(float64(c.draLeftOver()))
	}
	for _, name := range Steps {
		snap.Steps = append(snap.Steps, *c.steps[name])
	}
	snap.NVMLErrors = make(map[ErrorKey]uint64, len(s.errors))
	for k, v := range s.errors {
		snap.NVMLErrors[k] = v
	}
	s.latest.Store(snap)
	if s.cfg.OnSample != nil {
		s.cfg.OnSample(snap)
	}
	return snap
}

func (c *cycle) driverInfo() *Driver {
	lib := c.s.cfg.NVML
	v, ret := lib.SystemGetDriverVersion()
	if c.check("nvmlSystemGetDriverVersion", "", ret) != nil {
		return nil
	}
	d := &Driver{Version: v}
	if cv, ret := lib.SystemGetCudaDriverVersion(); c.check("nvmlSystemGetCudaDriverVersion", "", ret) == nil {
		d.CUDAVersion = fmt.Sprintf("%d.%d", cv/1000, cv%1000/10)
	}
	if nv, ret := lib.SystemGetNVMLVersion(); c.check("nvmlSystemGetNVMLVersion", "", ret) == nil {
		d.NVMLVersion = nv
	}
	return d
}

func (c *cycle) podResources() {
	if c.s.cfg.Allocations == nil {
		return
	}
	start := time.Now()
	a, err := c.s.cfg.Allocations.List(c.ctx)
	switch {
	case err != nil:
		// Keep the last answer: a kubelet restart must not blank the
		// owners. A kubelet that is not there yet, or not answering, is
		// logged once until it answers.
		if !c.s.allocsFailing {
			c.s.cfg.Logger.Warn("reading pod resources from the kubelet failed: pods are not attributed until it answers", "err", err)
		}
		c.s.allocsFailing = true
	default:
		if c.s.allocsFailing {
			c.s.cfg.Logger.Info("the kubelet's pod resources answer again")
		}
		c.s.allocsFailing = false
		c.s.allocs = a
	}
	c.draHolders()
	c.track(StepPodResources, start, err)
}

func (c *cycle) slurm() {
	if c.s.cfg.Slurm == nil {
		return
	}
	every := c.s.cfg.SlurmInterval
	if every == 0 {
		every = DefaultSlurmInterval
	}
	if !c.s.slurmRead.IsZero() && c.now.Sub(c.s.slurmRead) < every {
		c.track(StepSlurm, time.Now(), c.s.slurmErr) // the last answer stands, and its health
		return
	}
	c.s.slurmRead = c.now
	start := time.Now()
	jobs, err := c.s.cfg.Slurm.Jobs(c.ctx)
	if err != nil {
		// Keep the last answer: a slurmctld restart must not free every GPU.
		c.s.cfg.Logger.Warn("reading Slurm's allocations", "err", err)
	} else {
		c.s.slurmJobs = jobs
	}
	if pending, perr := c.s.cfg.Slurm.PendingGPUs(c.ctx); perr != nil {
		c.s.cfg.Logger.Warn("reading Slurm's pending jobs", "err", perr)
		c.s.slurmPending = Gauge{}
		err = errors.Join(err, perr)
	} else {
		c.s.slurmPending = some(float64(pending))
	}
	c.s.slurmErr = err
	c.track(StepSlurm, start, err)
}

// gpu samples one GPU. A GPU that fails, or panics, yields a GPU that is
// not up; the others are not affected.
func (c *cycle) gpu(i int) (g GPU) {
	g.Index, g.Minor = i, -1
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			c.s.cfg.Logger.Error("sampling GPU panicked", "index", i, "panic", r, "stack", string(debug.Stack()))
			g.Up, g.Units = false, nil
			c.track(StepDevice, start, fmt.Errorf("panic: %v", r))
		}
	}()
	lib := c.s.cfg.NVML
	unreadable := func(call string, err error) GPU {
		// Known before: it stays, down, with what was known of it.
		if uuid, ok := c.s.byIndex[i]; ok {
			g.UUID = uuid
			if st, ok := c.s.static[uuid]; ok {
				g.Model, g.PCIBusID = st.model, st.pciBusID
			}
			if cause := uuid + "/" + call + "/" + err.Error(); !c.s.lost[cause] {
				c.s.lost[cause] = true
				c.s.cfg.Logger.Warn("GPU unreadable: exported as down with its last known identity", "index", i, "uuid", uuid, "pci_bus_id", g.PCIBusID, "call", call, "err", err)
			}
		} else if cause := strconv.Itoa(i) + "/" + call + "/" + err.Error(); !c.s.lost[cause] {
			c.s.lost[cause] = true
			c.s.cfg.Logger.Warn("GPU unreadable since the exporter started: exported as down by its index, with no UUID", "index", i, "call", call, "err", err)
		}
		c.track(StepDevice, start, err)
		return g
	}
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if err := c.check("nvmlDeviceGetHandleByIndex", c.s.byIndex[i], ret); err != nil {
		return unreadable("nvmlDeviceGetHandleByIndex", err)
	}
	uuid, ret := dev.GetUUID()
	if err := c.check("nvmlDeviceGetUUID", c.s.byIndex[i], ret); err != nil {
		return unreadable("nvmlDeviceGetUUID", err)
	}
	c.s.byIndex[i] = uuid
	g.UUID = uuid
	err := c.deviceValues(dev, &g)
	c.track(StepDevice, start, err)
	if !g.Up {
		return g
	}
	if g.MIGEnabled.V == 1 {
		start = time.Now()
		err = c.migUnits(dev, &g)
		c.track(StepMIG, start, err)
		c.noteMIG(&g, err)
	}
	start = time.Now()
	c.track(StepGPM, start, c.gpmValues(dev, &g))
	start = time.Now()
	c.track(StepProcesses, start, c.processes(dev, &g))
	for j := range g.Units {
		g.Units[j].Holders = c.owners(&g, &g.Units[j])
	}
	return g
}

// deviceValues reads the whole-GPU values. Up stays false when the GPU
// cannot be read at all.
func (c *cycle) deviceValues(dev nvml.Device, g *GPU) error {
	var errs []error
	chk := func(call string, ret nvml.Return) bool {
		err := c.check(call, g.UUID, ret)
		if err != nil {
			errs = append(errs, err)
		}
		return err == nil
	}
	mem, ret := dev.GetMemoryInfo()
	if !chk("nvmlDeviceGetMemoryInfo", ret) {
		if st, ok := c.s.static[g.UUID]; ok {
			g.Model, g.PCIBusID = st.model, st.pciBusID
		}
		return errors.Join(errs...)
	}
	g.Up = true
	g.MemoryUsedBytes, g.MemoryTotalBytes = some(float64(mem.Used)), some(float64(mem.Total))
	st, ok := c.s.static[g.UUID]
	if !ok {
		if name, ret := dev.GetName(); chk("nvmlDeviceGetName", ret) {
			st.model = name
		}
		st.minor = -1
		if m, ret := dev.GetMinorNumber(); chk("nvmlDeviceGetMinorNumber", ret) {
			st.minor = m
		}
		if pci, ret := dev.GetPciInfo(); chk("nvmlDeviceGetPciInfo", ret) {
			st.pciBusID = busID(pci)
		}
		c.s.static[g.UUID] = st
	}
	g.Model, g.PCIBusID, g.Minor = st.model, st.pciBusID, st.minor
	if p, ret := dev.GetPowerUsage(); chk("nvmlDeviceGetPowerUsage", ret) {
		g.PowerWatts = some(float64(p) / 1000)
	}
	if e, ret := dev.GetTotalEnergyConsumption(); chk("nvmlDeviceGetTotalEnergyConsumption", ret) {
		g.EnergyJoules = some(float64(e) / 1000)
	}
	if t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); chk("nvmlDeviceGetTemperature", ret) {
		g.TemperatureCelsius = some(float64(t))
	}
	if cur, pending, ret := dev.GetMigMode(); chk("nvmlDeviceGetMigMode", ret) {
		g.MIGEnabled = some(boolf(cur == nvml.DEVICE_MIG_ENABLE))
		g.MIGPendingEnabled = some(boolf(pending == nvml.DEVICE_MIG_ENABLE))
	}
	if g.MIGEnabled.V == 1 {
		return errors.Join(errs...)
	}
	u := Unit{UUID: g.UUID, GPUUUID: g.UUID, MemoryUsedBytes: some(float64(mem.Used)), MemoryTotalBytes: some(float64(mem.Total))}
	if ut, ret := dev.GetUtilizationRates(); chk("nvmlDeviceGetUtilizationRates", ret) {
		u.Utilization = some(float64(ut.Gpu) / 100)
		u.MemoryControllerBusy = some(float64(ut.Memory) / 100)
	}
	g.Units = []Unit{u}
	return errors.Join(errs...)
}

func (c *cycle) migUnits(dev nvml.Device, g *GPU) error {
	var errs []error
	if _, ok := c.s.profiles[g.UUID]; !ok {
		mem, _ := dev.GetMemoryInfo()
		var sizing []mig.Profile
		for _, p := range mig.Profiles(dev, mem.Total) {
			if mig.Sizing(p.ID) {
				sizing = append(sizing, p)
			}
		}
		c.s.profiles[g.UUID] = sizing
	}
	g.Profiles = c.s.profiles[g.UUID]
	max, ret := dev.GetMaxMigDeviceCount()
	if err := c.check("nvmlDeviceGetMaxMigDeviceCount", g.UUID, ret); err != nil {
		return err
	}
	for j := 0; j < max; j++ {
		h, ret := dev.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no instance at this index
		}
		if err := c.check("nvmlDeviceGetMigDeviceHandleByIndex", g.UUID, ret); err != nil {
			errs = append(errs, err)
			continue
		}
		u, err := c.migUnit(dev, h, g)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g.Units = append(g.Units, u)
	}
	sort.Slice(g.Units, func(a, b int) bool { return g.Units[a].MIG.GPUInstanceID < g.Units[b].MIG.GPUInstanceID })
	if len(errs) > 0 {
		return errors.Join(errs...) // how many instances there are is not known
	}
	g.MIGInstances = some(float64(len(g.Units)))
	return nil
}

// noteMIG says once, in the log, that a GPU in MIG mode has no instance or
// that its instances could not be read: its memory and processes are then
// the GPU's alone.
func (c *cycle) noteMIG(g *GPU, err error) {
	state := ""
	switch {
	case err != nil:
		state = "failed: " + err.Error()
		c.s.cfg.Logger.Debug("listing MIG instances failed", "gpu_uuid", g.UUID, "err", err)
	case len(g.Units) == 0:
		state = "none"
	}
	if c.s.migState[g.UUID] == state {
		return
	}
	c.s.migState[g.UUID] = state
	switch {
	case err != nil:
		c.s.cfg.Logger.Warn("listing MIG instances failed: the GPU's processes and memory are exported for the GPU only", "gpu_uuid", g.UUID, "instances_read", len(g.Units), "err", err)
	case state == "none":
		c.s.cfg.Logger.Info("MIG mode is on and the GPU has no MIG instance: nothing can hold it until one is created", "gpu_uuid", g.UUID)
	}
}

func (c *cycle) migUnit(parent, h nvml.Device, g *GPU) (Unit, error) {
	uuid, ret := h.GetUUID()
	if err := c.check("nvmlDeviceGetUUID", g.UUID, ret); err != nil {
		return Unit{}, err
	}
	gi, ret := h.GetGpuInstanceId()
	if err := c.check("nvmlDeviceGetGpuInstanceId", uuid, ret); err != nil {
		return Unit{}, err
	}
	ci, ret := h.GetComputeInstanceId()
	if err := c.check("nvmlDeviceGetComputeInstanceId", uuid, ret); err != nil {
		return Unit{}, err
	}
	attr, ret := h.GetAttributes()
	if err := c.check("nvmlDeviceGetAttributes", uuid, ret); err != nil {
		return Unit{}, err
	}
	u := Unit{UUID: uuid, GPUUUID: g.UUID, MIG: &MIGInstance{
		GPUInstanceID:     gi,
		ComputeInstanceID: ci,
		Slices:            int(attr.GpuInstanceSliceCount),
		Profile:           c.profileName(g, attr),
		ProfileID:         -1,
		PlacementStart:    -1,
	}}
	// The GPU instance's profile and placement name it for a DRA driver;
	// without them the unit is still sampled.
	if inst, ret := parent.GetGpuInstanceById(gi); c.check("nvmlDeviceGetGpuInstanceById", uuid, ret) == nil {
		if info, ret := inst.GetInfo(); c.check("nvmlGpuInstanceGetInfo", uuid, ret) == nil {
			u.MIG.ProfileID, u.MIG.PlacementStart = int(info.ProfileId), int(info.Placement.Start)
		}
	}
	mem, ret := h.GetMemoryInfo()
	if err := c.check("nvmlDeviceGetMemoryInfo", uuid, ret); err != nil {
		return u, err
	}
	u.MemoryUsedBytes, u.MemoryTotalBytes = some(float64(mem.Used)), some(float64(mem.Total))
	return u, nil
}

// profileName names a MIG instance by the GPU's profile of the same size,
// prefixed "<n>c." when its compute instance spans only part of it.
func (c *cycle) profileName(g *GPU, attr nvml.DeviceAttributes) string {
	name := ""
	for _, p := range g.Profiles {
		if p.Slices == int(attr.GpuInstanceSliceCount) && p.MemoryBytes == attr.MemorySizeMB<<20 {
			name = p.Name
			break
		}
	}
	if name == "" {
		name = fmt.Sprintf("%dg.%dgb", attr.GpuInstanceSliceCount, (attr.MemorySizeMB+512)>>10)
	}
	if attr.ComputeInstanceSliceCount > 0 && attr.ComputeInstanceSliceCount < attr.GpuInstanceSliceCount {
		name = fmt.Sprintf("%dc.%s", attr.ComputeInstanceSliceCount, name)
	}
	return name
}

func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
