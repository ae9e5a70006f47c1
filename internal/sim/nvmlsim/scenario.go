package nvmlsim

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"go.yaml.in/yaml/v3"
)

// Scenario describes one simulated node: its GPUs, how busy each unit is over
// time, which processes and pods hold them. See scenarios/demo.yaml.
type Scenario struct {
	// Node is the node name the exporter reports.
	Node string `yaml:"node"`
	// System is the go-nvml mock server the node is built on: dgxa100, dgxh100 or dgxh200.
	System string `yaml:"system"`
	// Start is the wall-clock time the scenario's time 0 maps to; default: when the simulator starts.
	Start time.Time `yaml:"start"`
	// Speed runs the scenario this many times faster than the wall clock (default 1).
	Speed float64 `yaml:"speed"`
	// Users maps Unix user names to uids; root (0) is always known.
	Users map[string]int `yaml:"users"`
	Pods  []Pod          `yaml:"pods"`
	GPUs  []GPU          `yaml:"gpus"`
	// Allocation is how the simulated kubelet reports the pods' units:
	// device-plugin (default; by UUID) or dra (NVIDIA's DRA driver's device
	// names, through each pod's ResourceClaim).
	Allocation string `yaml:"allocation"`

	dir string // for relative trace paths
}

// How the simulated kubelet reports the pods' units (Scenario.Allocation).
const (
	AllocationDevicePlugin = "device-plugin"
	AllocationDRA          = "dra"
)

// Pod is a Kubernetes pod that the simulated kubelet reports as holding units.
type Pod struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
	Container string `yaml:"container"`
	UID       string `yaml:"uid"`
	// Claim is the pod's ResourceClaim under allocation: dra; default
	// <name>-gpu.
	Claim       string            `yaml:"claim"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Unit is what a job can hold: a whole GPU or a MIG instance.
type Unit struct {
	SMActive         Value `yaml:"sm_active"`
	SMOccupancy      Value `yaml:"sm_occupancy"`
	DRAMBandwidth    Value `yaml:"dram_bandwidth"`
	TensorActive     Value `yaml:"tensor_active"`
	Utilization      Value `yaml:"utilization"`       // default: sm_active
	MemoryController Value `yaml:"memory_controller"` // default: dram_bandwidth
	// MemoryUsed defaults to the sum of the processes' memory.
	MemoryUsed Value `yaml:"memory_used"`
	// Pods are allocated this unit by the device plugin.
	Pods      []string  `yaml:"pods"`
	Processes []Process `yaml:"processes"`
}

// GPU is one physical GPU. GPUs the scenario does not list are free.
type GPU struct {
	Index int    `yaml:"index"`
	UUID  string `yaml:"uuid"`
	// Minor is the device's minor number (/dev/nvidia<minor>); default its
	// index. NVIDIA's DRA driver names GPUs by it.
	Minor *int `yaml:"minor"`
	// GPM says whether GPM metrics are supported; default: Hopper and newer.
	GPM                *bool     `yaml:"gpm"`
	PowerWatts         Value     `yaml:"power_watts"`
	TemperatureCelsius Value     `yaml:"temperature_celsius"`
	LostAfter          *Duration `yaml:"lost_after"`
	// MPS runs an MPS control daemon: the processes are its clients.
	MPS bool `yaml:"mps"`
	// MPSUnsupported makes the driver answer NOT_SUPPORTED for its MPS clients.
	MPSUnsupported bool `yaml:"mps_unsupported"`
	// MIGEnabled turns MIG mode on with no instance (mig lists none): the
	// GPU's processes then sit on no instance.
	MIGEnabled bool `yaml:"mig_enabled"`
	// MIGPending is the MIG mode after the next reset, when it differs from now.
	MIGPending *bool         `yaml:"mig_pending"`
	MIG        []MIGInstance `yaml:"mig"`
	Unit       `yaml:",inline"`
}

// MIGInstance is one GPU instance with one compute instance spanning it.
type MIGInstance struct {
	Profile string `yaml:"profile"`
	Unit    `yaml:",inline"`
}

// Process is a process with a CUDA context on a unit.
type Process struct {
	PID     int    `yaml:"pid"`
	User    string `yaml:"user"`
	Command string `yaml:"command"`
	// Pod names the pod whose container runs the process (its cgroup).
	Pod string `yaml:"pod"`
	// SlurmJob is the Slurm job id whose cgroup holds the process.
	SlurmJob   string `yaml:"slurm_job"`
	MemoryUsed Value  `yaml:"memory_used"`
	// SMUtil is the process's share of SM time as NVML reports per process.
	SMUtil Value `yaml:"sm_util"`
	// Started is when the process started, relative to the scenario's time 0.
	Started Duration `yaml:"started"`
	// Graphics lists it among the graphics processes, not the compute ones.
	Graphics bool `yaml:"graphics"`
	// OutsideProc keeps it out of the node's /proc, as a process in a PID
	// namespace the exporter does not see: NVML lists it, /proc does not.
	OutsideProc bool `yaml:"outside_proc"`
}

// Load reads a scenario file; relative trace paths resolve against its folder.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc, err := Parse(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}

// Parse reads and validates a scenario.
func Parse(b []byte, dir string) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	sc := &Scenario{dir: dir}
	if err := dec.Decode(sc); err != nil {
		return nil, err
	}
	if err := sc.validate(); err != nil {
		return nil, err
	}
	return sc, nil
}

var (
	dnsLabel  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsName   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	slurmJob  = regexp.MustCompile(`^[0-9]+$`)
	unixUser  = regexp.MustCompile(`^[a-z_][a-z0-9_-]*[$]?$`)
	uuidShape = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

type validator struct {
	errs   []error
	traces traceCache
	dir    string
}

func (v *validator) errorf(path, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

func (sc *Scenario) validate() error {
	v := &validator{traces: traceCache{}, dir: sc.dir}
	if sc.Node == "" {
		v.errorf("node", "is required")
	} else if !dnsName.MatchString(sc.Node) {
		v.errorf("node", "%q is not a valid node name", sc.Node)
	}
	sys, ok := systems[sc.System]
	if !ok {
		v.errorf("system", "%q is not one of %s", sc.System, systemNames())
		return errors.Join(v.errs...)
	}
	if sc.Speed < 0 {
		v.errorf("speed", "must not be negative")
	}
	if sc.Speed == 0 {
		sc.Speed = 1
	}
	if sc.Users == nil {
		sc.Users = map[string]int{}
	}
	for name, uid := range sc.Users {
		if !unixUser.MatchString(name) {
			v.errorf("users."+name, "is not a valid Unix user name")
		}
		if uid < 0 {
			v.errorf("users."+name, "uid %d is negative", uid)
		}
	}
	sc.Users["root"] = 0
	switch sc.Allocation {
	case "":
		sc.Allocation = AllocationDevicePlugin
	case AllocationDevicePlugin, AllocationDRA:
	default:
		v.errorf("allocation", "%q is not %s or %s", sc.Allocation, AllocationDevicePlugin, AllocationDRA)
	}

	pods := map[string]*Pod{}
	for i := range sc.Pods {
		p := &sc.Pods[i]
		path := fmt.Sprintf("pods[%d]", i)
		if !dnsName.MatchString(p.Name) {
			v.errorf(path+".name", "%q is not a valid pod name", p.Name)
		}
		if p.Namespace == "" {
			p.Namespace = "default"
		} else if !dnsLabel.MatchString(p.Namespace) {
			v.errorf(path+".namespace", "%q is not a valid namespace", p.Namespace)
		}
		if p.Container == "" {
			p.Container = "main"
		}
		if p.UID == "" {
			p.UID = stableUUID(sc.Node, "pod", p.Namespace, p.Name)
		}
		if _, dup := pods[p.Name]; dup {
			v.errorf(path+".name", "pod %q is listed twice", p.Name)
		}
		pods[p.Name] = p
	}

	seenGPU := map[int]bool{}
	pids := map[int]string{}
	for i := range sc.GPUs {
		g := &sc.GPUs[i]
		path := fmt.Sprintf("gpus[%d]", i)
		if g.Index < 0 || g.Index >= sys.count {
			v.errorf(path+".index", "%d is out of range: %s has GPUs 0-%d", g.Index, sc.System, sys.count-1)
			continue
		}
		if seenGPU[g.Index] {
			v.errorf(path+".index", "GPU %d is listed twice", g.Index)
		}
		seenGPU[g.Index] = true
		if g.UUID == "" {
			g.UUID = "GPU-" + stableUUID(sc.Node, "gpu", fmt.Sprint(g.Index))
		} else if !uuidShape.MatchString(g.UUID) {
			v.errorf(path+".uuid", "%q is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", g.UUID)
		}
		if g.GPM != nil && *g.GPM && !sys.gpm {
			v.errorf(path+".gpm", "%s GPUs do not support GPM (Hopper and newer do)", sys.config.Name)
		}
		v.value(path+".power_watts", &g.PowerWatts, 0, 2000)
		v.value(path+".temperature_celsius", &g.TemperatureCelsius, 0, 120)
		if g.LostAfter != nil && *g.LostAfter < 0 {
			v.errorf(path+".lost_after", "must not be negative")
		}
		total := float64(sys.config.MemoryMB) * (1 << 20)
		if len(g.MIG) > 0 {
			if g.hasAny() {
				v.errorf(path, "a GPU in MIG mode is used through its instances: move the unit fields and processes under mig")
			}
			if g.MPS {
				v.errorf(path+".mps", "MPS on MIG instances is not simulated")
			}
			if g.MIGEnabled {
				v.errorf(path+".mig_enabled", "is for a GPU in MIG mode without instances; this one lists some")
			}
			slices := 0
			for j := range g.MIG {
				m := &g.MIG[j]
				mpath := fmt.Sprintf("%s.mig[%d]", path, j)
				prof, ok := sys.profile(m.Profile)
				if !ok {
					v.errorf(mpath+".profile", "%q is not a MIG profile of %s (have %s)", m.Profile, sys.config.Name, sys.profileNames())
					continue
				}
				slices += int(prof.SliceCount)
				v.unit(mpath, &m.Unit, float64(prof.MemorySizeMB)*(1<<20), pods, pids, sc.Users, false)
			}
			if slices > 7 {
				v.errorf(path+".mig", "the instances need %d compute slices; a GPU has 7", slices)
			}
		} else {
			v.unit(path, &g.Unit, total, pods, pids, sc.Users, g.MPS)
		}
	}
	return errors.Join(v.errs...)
}

func (u *Unit) hasAny() bool {
	return u.SMActive.IsSet() || u.SMOccupancy.IsSet() || u.DRAMBandwidth.IsSet() || u.TensorActive.IsSet() ||
		u.Utilization.IsSet() || u.MemoryController.IsSet() || u.MemoryUsed.IsSet() || len(u.Pods) > 0 || len(u.Processes) > 0
}

func (v *validator) unit(path string, u *Unit, memTotal float64, pods map[string]*Pod, pids map[int]string, users map[string]int, mps bool) {
	for _, f := range []struct {
		name string
		val  *Value
	}{
		{"sm_active", &u.SMActive}, {"sm_occupancy", &u.SMOccupancy}, {"dram_bandwidth", &u.DRAMBandwidth},
		{"tensor_active", &u.TensorActive}, {"utilization", &u.Utilization}, {"memory_controller", &u.MemoryController},
	} {
		v.value(path+"."+f.name, f.val, 0, 1)
	}
	if !u.Utilization.IsSet() {
		u.Utilization = u.SMActive
	}
	if !u.MemoryController.IsSet() {
		u.MemoryController = u.DRAMBandwidth
	}
	v.value(path+".memory_used", &u.MemoryUsed, 0, memTotal)
	allocated := map[string]bool{}
	for k, name := range u.Pods {
		if _, ok := pods[name]; !ok {
			v.errorf(fmt.Sprintf("%s.pods[%d]", path, k), "pod %q is not in pods", name)
		}
		allocated[name] = true
	}
	for k := range u.Processes {
		p := &u.Processes[k]
		ppath := fmt.Sprintf("%s.processes[%d]", path, k)
		if p.PID < 2 || p.PID > 4194304 {
			v.errorf(ppath+".pid", "%d is not a PID a workload can have (2-4194304)", p.PID)
		} else if other, dup := pids[p.PID]; dup {
			v.errorf(ppath+".pid", "%d is also used by %s", p.PID, other)
		}
		pids[p.PID] = ppath
		if p.User == "" {
			p.User = "root"
		}
		if _, ok := users[p.User]; !ok {
			v.errorf(ppath+".user", "%q is not in users", p.User)
		}
		if p.Command == "" {
			p.Command = "python"
		}
		if p.Pod != "" {
			// A pod that runs on a unit it was not allocated (a privileged
			// one sees every GPU) is allowed: the exporter must not credit
			// its process to the unit's holders.
			if _, ok := pods[p.Pod]; !ok {
				v.errorf(ppath+".pod", "pod %q is not in pods", p.Pod)
			}
			if p.SlurmJob != "" {
				v.errorf(ppath+".slurm_job", "a process runs in a pod or a Slurm job, not both")
			}
		}
		if p.SlurmJob != "" && !slurmJob.MatchString(p.SlurmJob) {
			v.errorf(ppath+".slurm_job", "%q is not a Slurm job id", p.SlurmJob)
		}
		v.value(ppath+".memory_used", &p.MemoryUsed, 0, memTotal)
		v.value(ppath+".sm_util", &p.SMUtil, 0, 1)
	}
	if mps && len(u.Processes) == 0 {
		v.errorf(path+".mps", "an MPS GPU needs client processes")
	}
}

// value resolves traces and checks the bounds of a field that was given.
func (v *validator) value(path string, val *Value, lo, hi float64) {
	if val.trace != nil {
		sig, err := v.traces.resolve(v.dir, val.trace)
		if err != nil {
			v.errorf(path, "%v", err)
			return
		}
		val.Signal = sig
		return
	}
	if !val.IsSet() {
		return
	}
	min, max := val.bounds()
	if min < lo || max > hi {
		v.errorf(path, "values must lie between %s and %s, got %s to %s", quantity(lo, hi), quantity(hi, hi), quantity(min, hi), quantity(max, hi))
	}
}

// quantity prints a bound in GiB where the range is one of bytes.
func quantity(v, scale float64) string {
	if scale >= 1<<20 {
		return fmt.Sprintf("%gGiB", math.Round(v/(1<<30)*100)/100)
	}
	return fmt.Sprintf("%g", v)
}

// stableUUID derives a UUID-shaped id from its parts, so that a scenario
// gives the same ids on every run (golden files depend on them).
func stableUUID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	b := h.Sum(nil)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func systemNames() string {
	names := make([]string, 0, len(systems))
	for n := range systems {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Sprint(names)
}
