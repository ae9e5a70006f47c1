package config

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	amlabels "github.com/prometheus/alertmanager/pkg/labels"
	"github.com/prometheus/common/model"
)

// Policy decides what happens to the targets whose alerts it matches.
type Policy struct {
	// Name tells the policy apart in messages, metrics and the audit
	// trail. Required, unique.
	Name string `yaml:"name"`
	// Matchers select alerts by label, in Alertmanager's syntax
	// (alertname="GPUIdle", namespace=~"team-.*"). All must match.
	Matchers []string `yaml:"matchers"`
	// Action is auto (the alert's action label; for a pod, what its top
	// owner needs), notify, kill, evict, scale_down or stop.
	Action Action `yaml:"action"`
	// Grace is the time between the warning and the action. Default 15m.
	Grace *Duration `yaml:"grace"`
	// MinRuntime spares workloads younger than this, from their start. Default 30m; 0s spares none.
	MinRuntime *Duration `yaml:"min_runtime"`
	// DryRun for this policy alone.
	DryRun bool `yaml:"dry_run"`
	// ScaleDownTo is the replica count scale_down sets. Default 0.
	ScaleDownTo int32 `yaml:"scale_down_to"`
	// Windows restrict actions to these times; none means any time.
	Windows []Window `yaml:"windows"`
	// RestoreWhen is a PromQL expression, a template over the reclaim's
	// labels (see RestoreData), that Prometheus answers with a sample when
	// the workload is wanted again: its Service's request rate, a queue's
	// length. The reclaimer then restores it (scales it back, resumes it)
	// and tells the owner. Empty: a person restores. Labels are read as
	// {{ .label }} inside a double-quoted string, with if/else and eq, ne,
	// and, or, not; index, range, with, variables and other functions are
	// refused.
	RestoreWhen string `yaml:"restore_when"`
	// RestoreWithin is how long after the action restore_when is watched.
	// Default 24h.
	RestoreWithin *Duration `yaml:"restore_within"`
	// Demand, when set, makes the action wait for GPUs of the target's kind
	// to be wanted, or shortens the grace while they are.
	Demand *Demand `yaml:"demand"`

	matchers    amlabels.Matchers
	restoreWhen *template.Template
}

// RestoreWithinTime is how long restore_when is watched, defaulted.
func (p *Policy) RestoreWithinTime() time.Duration { return time.Duration(*p.RestoreWithin) }

// GraceTime is the grace, defaulted.
func (p *Policy) GraceTime() time.Duration { return time.Duration(*p.Grace) }

// MinRuntimeTime is the minimum runtime, defaulted.
func (p *Policy) MinRuntimeTime() time.Duration { return time.Duration(*p.MinRuntime) }

// Policy finds a policy by name.
func (cfg *Config) Policy(name string) *Policy {
	for i := range cfg.Policies {
		if cfg.Policies[i].Name == name {
			return &cfg.Policies[i]
		}
	}
	return nil
}

// Matches says whether the policy applies to an alert's labels.
func (p *Policy) Matches(lset model.LabelSet) bool { return p.matchers.Matches(lset) }

// Window is a time of day (and days of the week) when actions may run.
// From after To spans midnight (22:00-06:00).
type Window struct {
	// Days of the week (mon, tue, ...); none means every day.
	Days []string `yaml:"days"`
	// From and To are times of day, HH:MM.
	From string `yaml:"from"`
	To   string `yaml:"to"`
	// Timezone of From and To (an IANA name). Default UTC.
	Timezone string `yaml:"timezone"`

	Loc      *time.Location        `yaml:"-"`
	FromMin  int                   `yaml:"-"`
	ToMin    int                   `yaml:"-"`
	Weekdays map[time.Weekday]bool `yaml:"-"`
}

// DefaultPolicies apply when the file has none: act on GPUIdle as the
// alert suggests, notify on everything else.
func DefaultPolicies() []Policy {
	return []Policy{
		{Name: "idle", Matchers: []string{`alertname="` + names.AlertIdle + `"`}, Action: ActionAuto},
		{Name: "notify", Matchers: []string{`alertname=~"GPUWasted|GPUOvercommitted|MIGInstanceOversized"`}, Action: ActionNotify},
	}
}

var (
	hhmm     = regexp.MustCompile(`^([01][0-9]|2[0-3]):([0-5][0-9])$`)
	weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}
)

func (cfg *Config) validatePolicies(c *checker) {
	if len(cfg.Policies) == 0 {
		cfg.Policies = DefaultPolicies()
	}
	names := map[string]bool{}
	for i := range cfg.Policies {
		cfg.Policies[i].validate(c, fmt.Sprintf("policies[%d]", i), names)
		cfg.Policies[i].validateRestore(c, fmt.Sprintf("policies[%d]", i), cfg.Prometheus)
		cfg.Policies[i].validateDemand(c, fmt.Sprintf("policies[%d]", i), cfg.Prometheus)
		switch a := cfg.Policies[i].Action; {
		case (a == ActionCancel || a == ActionRequeue) && !cfg.Slurm.On():
			c.errorf(fmt.Sprintf("policies[%d].action", i), "%s goes through slurmrestd: set slurm.url", a)
		case a == ActionRequeue && !c.skipSecrets:
			if _, err := exec.LookPath(cfg.Slurm.Scontrol); err != nil {
				c.errorf("slurm.scontrol", "a requeue runs scontrol on this host: %v", err)
			}
		}
	}
}

func (p *Policy) validate(c *checker, field string, names map[string]bool) {
	if p.Name == "" {
		c.errorf(field+".name", "is required")
	} else if names[p.Name] {
		c.errorf(field+".name", "%q is used by another policy", p.Name)
	}
	names[p.Name] = true
	if len(p.Matchers) == 0 {
		c.errorf(field+".matchers", "is required (a policy for every alert is too broad to be safe)")
	}
	p.matchers = nil
	for j, m := range p.Matchers {
		lm, err := amlabels.ParseMatcher(m)
		if err != nil {
			c.errorf(fmt.Sprintf("%s.matchers[%d]", field, j), "%v", err)
			continue
		}
		p.matchers = append(p.matchers, lm)
	}
	switch p.Action {
	case ActionAuto, ActionNotify, ActionKill, ActionEvict, ActionScaleDown, ActionStop, ActionCancel, ActionRequeue:
	case "":
		c.errorf(field+".action", "is required: auto, notify, kill, evict, scale_down, stop, cancel or requeue")
	default:
		c.errorf(field+".action", "%q is not one of auto, notify, kill, evict, scale_down, stop, cancel, requeue", p.Action)
	}
	p.Grace = c.optDuration(field+".grace", p.Grace, 15*time.Minute)
	p.MinRuntime = c.optDuration(field+".min_runtime", p.MinRuntime, 30*time.Minute)
	if p.ScaleDownTo < 0 {
		c.errorf(field+".scale_down_to", "must not be negative")
	}
	for j := range p.Windows {
		p.Windows[j].validate(c, fmt.Sprintf("%s.windows[%d]", field, j))
	}
}

func (w *Window) validate(c *checker, field string) {
	tz := w.Timezone
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		c.errorf(field+".timezone", "%q is not a time zone (e.g. Europe/Berlin)", w.Timezone)
	}
	w.Loc = loc
	for _, f := range []struct {
		name string
		v    string
		out  *int
	}{{"from", w.From, &w.FromMin}, {"to", w.To, &w.ToMin}} {
		m := hhmm.FindStringSubmatch(f.v)
		if m == nil {
			c.errorf(field+"."+f.name, "%q is not a time of day (HH:MM)", f.v)
			continue
		}
		h, _ := strconv.Atoi(m[1]) // the pattern matched digits
		mi, _ := strconv.Atoi(m[2])
		*f.out = h*60 + mi
	}
	if w.From != "" && w.From == w.To {
		c.errorf(field, "from and to are both %s: an empty window", w.From)
	}
	w.Weekdays = map[time.Weekday]bool{}
	for k, d := range w.Days {
		wd, ok := weekdays[strings.ToLower(d)]
		if !ok {
			c.errorf(fmt.Sprintf("%s.days[%d]", field, k), "%q is not a day (mon, tue, ...)", d)
		}
		w.Weekdays[wd] = true
	}
}
