// Package nvmlsim simulates a GPU node at the NVML boundary: an
// nvml.Interface built on go-nvml's mock servers, with utilization, GPM
// samples, processes, MPS, memory, power and MIG layouts driven by a
// Scenario, and the matching /proc tree for process attribution.
package nvmlsim

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Sim is a simulated node. It implements nvml.Interface.
type Sim struct {
	*server.Server
	sc    *Scenario
	sys   system
	now   func() time.Time
	start time.Time

	mu      sync.Mutex
	devices []*device
	byUUID  map[string]nvml.Device
	killed  map[int]bool
	// removedPods are pods the kubelet no longer runs (evicted, scaled down).
	removedPods map[string]bool
	// clusterClaims are the DRA allocations of pods the scenario does not
	// list, as a cluster's scheduler made them (SetClusterClaims).
	clusterClaims []ClusterClaim
	procRoot      string
	calls         map[string]int
}

var _ nvml.Interface = (*Sim)(nil)

// New builds the simulated node. now is the wall clock; the scenario's time 0
// is sc.Start, or the first reading of now when the scenario leaves it unset.
func New(sc *Scenario, now func() time.Time) (*Sim, error) {
	sys := systems[sc.System]
	s := &Sim{
		Server:      sys.new(),
		sc:          sc,
		sys:         sys,
		now:         now,
		start:       sc.Start,
		byUUID:      map[string]nvml.Device{},
		killed:      map[int]bool{},
		removedPods: map[string]bool{},
		calls:       map[string]int{},
	}
	if s.start.IsZero() {
		s.start = now()
	}
	given := map[int]*GPU{}
	for i := range sc.GPUs {
		given[sc.GPUs[i].Index] = &sc.GPUs[i]
	}
	for i, d := range s.Devices {
		g := given[i]
		if g == nil {
			g = &GPU{Index: i, UUID: "GPU-" + stableUUID(sc.Node, "gpu", fmt.Sprint(i))}
		}
		dev, err := newDevice(s, d.(*server.Device), g)
		if err != nil {
			return nil, fmt.Errorf("gpus[%d]: %w", i, err)
		}
		s.devices = append(s.devices, dev)
		s.Devices[i] = dev
		s.byUUID[dev.uuid] = dev
		for _, m := range dev.migs {
			s.byUUID[m.uuid] = m
		}
	}
	return s, nil
}

// Scenario returns the scenario the node runs.
func (s *Sim) Scenario() *Scenario { return s.sc }

// Start is the wall-clock time of the scenario's time 0.
func (s *Sim) Start() time.Time { return s.start }

// elapsed is the scenario time now.
func (s *Sim) elapsed() time.Duration {
	return time.Duration(float64(s.now().Sub(s.start)) * s.sc.Speed)
}

// Kill removes a process from the simulated node, as if it had exited: it
// leaves its GPU and its /proc entry. It reports whether the process was there.
func (s *Sim) Kill(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.killed[pid] || s.process(pid) == nil {
		return false
	}
	s.killed[pid] = true
	s.removeProc(pid)
	return true
}

// ClusterClaim is a device allocation a cluster made to a pod on the node:
// the scheduler allocated the claim from the node's ResourceSlice.
type ClusterClaim struct {
	Namespace, Pod, Container string
	ClaimNamespace, ClaimName string
	// Devices are the claim's allocation results.
	Devices []ClaimDevice
}

// ClaimDevice is one device of a claim's allocation.
type ClaimDevice struct{ Driver, Pool, Device string }

// SetClusterClaims replaces the allocations a cluster made to pods the
// scenario does not list: under allocation: dra the simulated kubelet
// reports them beside the scenario's own.
func (s *Sim) SetClusterClaims(c []ClusterClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusterClaims = c
}

// AdoptPodUID gives a scenario pod the UID its cluster gave the pod of the
// same name, and rewrites its processes' cgroups to carry it, as a real
// node's would: a pod list read from the cluster then names them. It says
// whether anything changed.
func (s *Sim) AdoptPodUID(name, uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pod *Pod
	for i := range s.sc.Pods {
		if s.sc.Pods[i].Name == name {
			pod = &s.sc.Pods[i]
		}
	}
	if pod == nil || uid == "" || pod.UID == uid || s.removedPods[name] {
		return false
	}
	pod.UID = uid
	if s.procRoot == "" {
		return true
	}
	pods := map[string]*Pod{name: pod}
	for _, d := range s.devices {
		for _, u := range d.units() {
			for i := range u.cfg.Processes {
				p := &u.cfg.Processes[i]
				if p.Pod != name || s.killed[p.PID] || p.OutsideProc {
					continue
				}
				_ = s.writeProc(s.procRoot, p, s.cgroupOf(p, pods)) // as Kill's removal, best effort
			}
		}
	}
	return true
}

// RemovePod ends a pod, as when it is evicted or its Deployment is scaled
// down: the kubelet stops reporting it and its processes leave their GPUs.
func (s *Sim) RemovePod(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removedPods[name] {
		return false
	}
	found := false
	for _, p := range s.sc.Pods {
		found = found || p.Name == name
	}
	if !found {
		return false
	}
	s.removedPods[name] = true
	for _, d := range s.devices {
		for _, u := range d.units() {
			for _, p := range u.cfg.Processes {
				if p.Pod == name {
					s.removeProc(p.PID)
				}
			}
		}
	}
	return true
}

// Alive says whether a simulated process is still running.
func (s *Sim) Alive(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.process(pid)
	return p != nil && !s.killed[pid] && !s.removedPods[p.Pod]
}

func (s *Sim) process(pid int) *Process {
	for _, d := range s.devices {
		for _, u := range d.units() {
			for i := range u.cfg.Processes {
				if u.cfg.Processes[i].PID == pid {
					return &u.cfg.Processes[i]
				}
			}
		}
	}
	return nil
}

// Calls returns how many times each NVML call was made, and resets the counts.
func (s *Sim) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = map[string]int{}
	return c
}

func (s *Sim) count(call string) {
	s.mu.Lock()
	s.calls[call]++
	s.mu.Unlock()
}

func (s *Sim) Init() nvml.Return     { return nvml.SUCCESS }
func (s *Sim) Shutdown() nvml.Return { return nvml.SUCCESS }

func (s *Sim) DeviceGetCount() (int, nvml.Return) {
	s.count("DeviceGetCount")
	return len(s.devices), nvml.SUCCESS
}

func (s *Sim) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	s.count("DeviceGetHandleByIndex")
	if i < 0 || i >= len(s.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if s.devices[i].lost() {
		// As real NVML: a GPU off the bus has no handle to get.
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return s.devices[i], nvml.SUCCESS
}

func (s *Sim) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	s.count("DeviceGetHandleByUUID")
	if d, ok := s.byUUID[uuid]; ok {
		return d, nvml.SUCCESS
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (s *Sim) SystemGetDriverVersion() (string, nvml.Return) {
	s.count("SystemGetDriverVersion")
	return s.DriverVersion, nvml.SUCCESS
}

func (s *Sim) SystemGetCudaDriverVersion() (int, nvml.Return) {
	s.count("SystemGetCudaDriverVersion")
	return s.CudaDriverVersion, nvml.SUCCESS
}

func (s *Sim) SystemGetNVMLVersion() (string, nvml.Return) {
	s.count("SystemGetNVMLVersion")
	return s.NvmlVersion, nvml.SUCCESS
}

// signalAt evaluates a unit field, 0 when the scenario leaves it unset.
func signalAt(v *Value, t time.Duration) float64 {
	if !v.IsSet() {
		return 0
	}
	return v.At(t)
}

// mean averages a field over [from, to], as GPM averages between two samples.
func mean(v *Value, from, to time.Duration) float64 {
	if !v.IsSet() {
		return 0
	}
	const points = 16
	if c, ok := v.Signal.(Constant); ok {
		return float64(c)
	}
	if to <= from {
		return v.At(to)
	}
	sum := 0.0
	for i := 0; i < points; i++ {
		sum += v.At(from + (to-from)*time.Duration(2*i+1)/(2*points))
	}
	return sum / points
}

func clamp01(f float64) float64 { return math.Max(0, math.Min(1, f)) }
