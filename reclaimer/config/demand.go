package config

import (
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// Demand makes a policy depend on whether GPUs of the target's kind are
// wanted: pending pods that request them, Kueue's pending workloads and
// Slurm's pending GPU jobs, as the rules record them
// (names.RecGPUsWanted). The reclaimer asks Prometheus when it warns and
// when the action is due.
type Demand struct {
	// Required: the action waits until GPUs of the kind are wanted (the
	// owner keeps the GPU while nobody waits for one).
	Required bool `yaml:"required"`
	// Grace, while GPUs of the kind are wanted when the owner is warned,
	// replaces the policy's grace: shorter, since someone waits.
	Grace *Duration `yaml:"grace"`
}

// GraceTime is the grace while GPUs are wanted, 0 when unset.
func (d *Demand) GraceTime() time.Duration {
	if d == nil || d.Grace == nil {
		return 0
	}
	return time.Duration(*d.Grace)
}

// WantedQuery is the query that answers whether GPUs of a unit's kind are
// wanted: a whole GPU's resource, or a MIG profile's (kind, profile as the
// alert labels them).
func WantedQuery(kind, migProfile string) string {
	return names.RecGPUsWanted + `{resource="` + names.GPUResourceKSM(kind, migProfile) + `"} > 0`
}

func (p *Policy) validateDemand(c *checker, field string, prom Prometheus) {
	d := p.Demand
	if d == nil {
		return
	}
	field += ".demand"
	if !prom.On() {
		c.errorf(field, "is asked of Prometheus: set prometheus.url")
	}
	if !d.Required && d.Grace == nil {
		c.errorf(field, "give required: true, a grace, or both")
	}
	if d.Grace != nil {
		switch g := time.Duration(*d.Grace); {
		case g < 0:
			c.errorf(field+".grace", "%s must not be negative", g)
		case p.Grace != nil && g > p.GraceTime():
			c.errorf(field+".grace", "%s is longer than the policy's grace (%s): while GPUs are wanted the owner gets less time, not more", g, p.GraceTime())
		}
	}
}
