package config

import (
	"maps"
	"slices"
	"time"
)

// Kinds of what an action frees, for the release deadlines that are not a
// Kubernetes top owner's Kind.
const (
	// ReleaseKindPod is a bare pod, evicted.
	ReleaseKindPod = "Pod"
	// ReleaseKindProcess is a kill of a unit's processes on a node.
	ReleaseKindProcess = "process"
	// ReleaseKindSlurmJob is a Slurm job cancelled or requeued.
	ReleaseKindSlurmJob = "SlurmJob"
)

// Release is how the reclaimer sees that an action freed the GPU: it looks
// at the world at once, then after as long as it has been since the action
// (1s, 2s, 4s, ...) but at most every interval, until the holders are gone; it gives up at
// the deadline of what it stopped, telling the owner and the admins that
// the GPU is still held and what the controller said.
type Release struct {
	// Timeout is the deadline of every kind not in Timeouts. Default 5m.
	Timeout Duration `yaml:"timeout"`
	// Timeouts are deadlines per kind: a top owner's Kind (RayJob,
	// Deployment, ...), Pod (an eviction), process (a kill) or SlurmJob.
	// They extend the built-in ones (DefaultReleaseTimeouts).
	Timeouts map[string]Duration `yaml:"timeouts"`
	// Interval is the longest wait between two looks. Default 10s.
	Interval Duration `yaml:"interval"`
	// OnNotReleased is what becomes of a stop whose GPU was not seen
	// released by its deadline: undo (the default) takes it back, so that
	// no controller carries it out later with nobody told, and the owner
	// hears the workload was left running; keep leaves it written, says so,
	// and follows it: once the controller carries it out the reclaim is
	// done at that time. Either way a restore takes a stop left in place back.
	OnNotReleased string `yaml:"on_not_released"`
}

// What becomes of a stop that did not release the GPU (release.on_not_released).
const (
	NotReleasedUndo = "undo"
	NotReleasedKeep = "keep"
)

// DefaultReleaseTimeouts are the deadlines of the kinds whose stop is
// quicker or slower than the default: a kill has already waited out its
// grace; a Ray cluster's head and workers shut down one by one.
func DefaultReleaseTimeouts() map[string]Duration {
	return map[string]Duration{
		ReleaseKindProcess: Duration(2 * time.Minute),
		"RayCluster":       Duration(10 * time.Minute),
		"RayJob":           Duration(10 * time.Minute),
	}
}

// TimeoutFor is the release deadline of a kind.
func (r Release) TimeoutFor(kind string) time.Duration {
	if d, ok := r.Timeouts[kind]; ok {
		return time.Duration(d)
	}
	return time.Duration(r.Timeout)
}

func (r *Release) validate(c *checker) {
	c.duration("release.timeout", &r.Timeout, 5*time.Minute)
	c.duration("release.interval", &r.Interval, 10*time.Second)
	if r.Timeout == 0 {
		c.errorf("release.timeout", "must be positive: a stop that is never seen to free the GPU must end somewhen")
	}
	if r.Interval == 0 || r.Interval > r.Timeout {
		c.errorf("release.interval", "%s must be positive and at most release.timeout (%s)", r.Interval, r.Timeout)
	}
	switch r.OnNotReleased {
	case "":
		r.OnNotReleased = NotReleasedUndo
	case NotReleasedUndo, NotReleasedKeep:
	default:
		c.errorf("release.on_not_released", "%q is neither %s nor %s", r.OnNotReleased, NotReleasedUndo, NotReleasedKeep)
	}
	all := DefaultReleaseTimeouts()
	for _, k := range slices.Sorted(maps.Keys(r.Timeouts)) {
		d := r.Timeouts[k]
		if k == "" {
			c.errorf("release.timeouts", "a kind is empty")
		}
		if d <= 0 {
			c.errorf("release.timeouts."+k, "must be positive")
		}
		all[k] = d
	}
	r.Timeouts = all
}
