package sampler

import (
	"errors"
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/procfs"
)

// mpsServerName is the comm of the MPS server process: nvidia-cuda-mps-server
// cut to the kernel's 15 characters.
const mpsServerName = "nvidia-cuda-mps"

// Why /proc could not place a process NVML lists.
const (
	causeNoProcfs  = "process attribution is off (--path.procfs is empty)"
	causeNotInProc = "not in the exporter's /proc: it runs in another PID namespace (run the exporter with the host's PIDs)"
	causeProcError = "reading its /proc entry failed"
	// A process in a pod whose pod the exporter cannot name: on a unit
	// several pods share, crediting it to any of them could make a busy
	// pod read idle.
	causePodNotListed = "its pod (the UID in its cgroup) is not among the node's listed pods"
	causeNoPodList    = "its pod cannot be told from the unit's other holders: the exporter lists no pods (--kubernetes.node-pods)"
)

// processes lists the processes on each unit (compute, MPS clients and
// graphics: a held GPU is held, whatever holds it) and reads /proc for each.
// A process /proc cannot place still counts: its unit is held by someone
// the exporter cannot name.
func (c *cycle) processes(dev nvml.Device, g *GPU) error {
	var errs []error
	procs, ret := dev.GetComputeRunningProcesses()
	if err := c.check("nvmlDeviceGetComputeRunningProcesses", g.UUID, ret); err != nil {
		return err
	}
	graphics, ret := dev.GetGraphicsRunningProcesses()
	if err := c.check("nvmlDeviceGetGraphicsRunningProcesses", g.UUID, ret); err != nil && !errors.Is(err, errNotSupported) {
		errs = append(errs, err)
	}
	var clients []nvml.ProcessInfo
	if g.MIGEnabled.V != 1 {
		var ret nvml.Return
		clients, ret = dev.GetMPSComputeRunningProcesses()
		err := c.check("nvmlDeviceGetMPSComputeRunningProcesses", g.UUID, ret)
		switch {
		case err == nil:
			g.MPSClients = some(float64(len(clients)))
		case !errors.Is(err, errNotSupported):
			errs = append(errs, err)
		}
	}
	smUtil := map[uint32]float64{}
	if g.MIGEnabled.V != 1 {
		if err := c.processUtilization(dev, g, smUtil); err != nil {
			errs = append(errs, err)
		}
	}
	unitOf := func(p nvml.ProcessInfo) *Unit {
		if g.MIGEnabled.V != 1 {
			return &g.Units[0]
		}
		for i := range g.Units {
			m := g.Units[i].MIG
			if uint32(m.GPUInstanceID) == p.GpuInstanceId && uint32(m.ComputeInstanceID) == p.ComputeInstanceId {
				return &g.Units[i]
			}
		}
		return nil
	}
	seen := map[uint32]bool{}
	add := func(p nvml.ProcessInfo, mpsClient, gfx bool) {
		if seen[p.Pid] {
			return // a process with a compute and a graphics context counts once
		}
		seen[p.Pid] = true
		pr := Process{PID: int(p.Pid), MemoryUsed: p.UsedGpuMemory, MPSClient: mpsClient, Graphics: gfx}
		if v, ok := smUtil[p.Pid]; ok {
			pr.SMUtil = some(v)
		}
		if c.s.cfg.Proc == nil {
			pr.Unattributed = causeNoProcfs
		} else {
			info, err := c.s.cfg.Proc.Process(int(p.Pid))
			switch {
			case errors.Is(err, procfs.ErrNoProcess):
				pr.Unattributed = causeNotInProc
			case err != nil:
				pr.Unattributed = causeProcError
				errs = append(errs, err)
			default:
				pr.Name, pr.User, pr.StartTime = info.Name, info.User, info.StartTime
				pr.PodUID, pr.ContainerID, pr.SlurmJob = info.PodUID, info.ContainerID, info.SlurmJob
			}
		}
		if pr.Unattributed != "" {
			c.unattributed(g, pr)
		}
		if pr.Name == mpsServerName {
			g.MPSServerRunning = true
		}
		g.Processes++
		u := unitOf(p)
		if u == nil {
			g.Unplaced = append(g.Unplaced, pr) // no instance of its own, or one not read
			return
		}
		if pr.Unattributed != "" {
			u.Unattributed++
		}
		u.Processes = append(u.Processes, pr)
	}
	for _, p := range procs {
		add(p, false, false)
	}
	for _, p := range clients {
		add(p, true, false)
	}
	for _, p := range graphics {
		add(p, false, true)
	}
	for i := range g.Units {
		ps := g.Units[i].Processes
		sort.Slice(ps, func(a, b int) bool { return ps[a].PID < ps[b].PID })
	}
	return errors.Join(errs...)
}

// unattributed logs a process /proc cannot place: each at debug, each
// cause once at info.
func (c *cycle) unattributed(g *GPU, p Process) {
	c.s.cfg.Logger.Debug("a process on the GPU cannot be attributed", "gpu_uuid", g.UUID, "pid", p.PID, "cause", p.Unattributed)
	if !c.s.causes[p.Unattributed] {
		c.s.causes[p.Unattributed] = true
		c.s.cfg.Logger.Info("processes NVML lists cannot be attributed: their units count as held by "+names.UnattributedUser, "cause", p.Unattributed)
	}
}

// processUtilization reads each process's share of SM time since the last
// cycle, keeping the newest sample per process.
func (c *cycle) processUtilization(dev nvml.Device, g *GPU, out map[uint32]float64) error {
	samples, ret := dev.GetProcessUtilization(c.s.procUtilSeen[g.UUID])
	if ret == nvml.ERROR_NOT_FOUND {
		return nil // no process ran since the last cycle
	}
	if err := c.check("nvmlDeviceGetProcessUtilization", g.UUID, ret); err != nil {
		if errors.Is(err, errNotSupported) {
			return nil
		}
		return err
	}
	newest := map[uint32]uint64{}
	for _, s := range samples {
		if s.TimeStamp >= newest[s.Pid] {
			newest[s.Pid] = s.TimeStamp
			out[s.Pid] = clamp01(float64(s.SmUtil) / 100)
		}
		if s.TimeStamp > c.s.procUtilSeen[g.UUID] {
			c.s.procUtilSeen[g.UUID] = s.TimeStamp
		}
	}
	return nil
}

type ownerKey struct {
	namespace, pod, container, user, slurmJob string
	claim                                     podresources.Claim
}

// owners says who holds a unit: the containers the kubelet allocated it to,
// the Slurm jobs slurmctld allocated its GPU to, and the owners of its
// processes. A process in a pod counts for its pod's container; a process
// outside any pod for its Unix user and Slurm job.
func (c *cycle) owners(g *GPU, u *Unit) []Holder {
	gpuIndex := g.Index
	allocated := c.s.allocs.Units[u.UUID]
	if k, ok := unitDRAKey(g, u); ok {
		allocated = append(slices.Clone(allocated), c.dra[k]...)
		c.draUsed[k] = true
	}
	allocated = append(slices.Clone(allocated), c.draByUUID[u.UUID]...)
	byKey := map[ownerKey]*Holder{}
	var order []ownerKey
	get := func(k ownerKey) *Holder {
		o, ok := byKey[k]
		if !ok {
			o = &Holder{Namespace: k.namespace, Pod: k.pod, Container: k.container, User: k.user, SlurmJob: k.slurmJob, Claim: k.claim}
			if k.pod != "" && c.s.cfg.Pods != nil {
				if m, ok := c.s.cfg.Pods.PodByName(k.namespace, k.pod); ok {
					o.Keep = m.Keep
				}
			}
			byKey[k] = o
			order = append(order, k)
		}
		return o
	}
	for _, a := range allocated {
		get(ownerKey{namespace: a.Namespace, pod: a.Pod, container: a.Container, claim: a.Claim})
	}
	if u.MIG == nil { // Slurm's GRES indices name whole GPUs
		for _, j := range c.s.slurmJobs {
			if !slices.Contains(j.GPUs, gpuIndex) {
				continue
			}
			o := get(ownerKey{user: j.User, slurmJob: j.ID})
			o.Keep = o.Keep || j.Keep
			o.StartTime = j.Start // the allocation's start: a job holds its GPUs from then
		}
	}
	for _, p := range u.Processes {
		if p.Name == mpsServerName {
			continue // infrastructure, not a tenant
		}
		k, cause := c.processOwner(p, allocated)
		if cause != "" {
			p.Unattributed = cause
			c.unattributed(g, p)
			u.Unattributed++
		}
		o := get(k)
		o.Processes++
		o.MemoryUsed += p.MemoryUsed
		if p.SMUtil.OK {
			o.SMUtil = some(clamp01(o.SMUtil.V + p.SMUtil.V))
		}
		if !p.StartTime.IsZero() && (o.StartTime.IsZero() || p.StartTime.Before(o.StartTime)) {
			o.StartTime = p.StartTime
		}
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.namespace != b.namespace {
			return a.namespace < b.namespace
		}
		if a.pod != b.pod {
			return a.pod < b.pod
		}
		if a.container != b.container {
			return a.container < b.container
		}
		if a.user != b.user {
			return a.user < b.user
		}
		return a.slurmJob < b.slurmJob
	})
	out := make([]Holder, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out
}

// processOwner is the holder a process counts for; with a cause when a
// process /proc could place cannot be given to a holder.
func (c *cycle) processOwner(p Process, allocated []podresources.Container) (ownerKey, string) {
	k, cause := c.processHolder(p, allocated)
	// A process of a container that holds the unit through a claim is that
	// holder's.
	for _, a := range allocated {
		if k.pod != "" && a.Namespace == k.namespace && a.Pod == k.pod && a.Container == k.container {
			k.claim = a.Claim
			break
		}
	}
	return k, cause
}

var unattributedKey = ownerKey{user: names.UnattributedUser}

// processHolder names the holder of a process: its own pod (whether or
// not the kubelet allocated the unit to it), else its Unix user and Slurm
// job. A process in a pod the exporter cannot name counts for no pod but
// the unattributed user, except on a unit the kubelet allocated to one
// container and no pod list to tell otherwise.
func (c *cycle) processHolder(p Process, allocated []podresources.Container) (ownerKey, string) {
	if p.PodUID != "" {
		if c.s.cfg.Pods != nil {
			m, ok := c.s.cfg.Pods.PodByUID(p.PodUID)
			if !ok {
				return unattributedKey, causePodNotListed
			}
			container := m.Containers[p.ContainerID]
			if container == "" {
				// Its container's id is not listed (not started when listed):
				// the pod's one container the unit is allocated to.
				var of []string
				for _, a := range allocated {
					if a.Namespace == m.Namespace && a.Pod == m.Name && !slices.Contains(of, a.Container) {
						of = append(of, a.Container)
					}
				}
				if len(of) == 1 {
					container = of[0]
				}
			}
			return ownerKey{namespace: m.Namespace, pod: m.Name, container: container}, ""
		}
		if len(allocated) == 1 {
			a := allocated[0]
			return ownerKey{namespace: a.Namespace, pod: a.Pod, container: a.Container}, ""
		}
		return unattributedKey, causeNoPodList
	}
	if p.Unattributed != "" {
		// The kubelet's allocation still names a unit's one container.
		if len(allocated) == 1 {
			a := allocated[0]
			return ownerKey{namespace: a.Namespace, pod: a.Pod, container: a.Container}, ""
		}
		return unattributedKey, ""
	}
	return ownerKey{user: p.User, slurmJob: p.SlurmJob}, ""
}
