package lifecycle

import (
	"slices"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// matchPolicy finds the first policy whose matchers match the labels.
func matchPolicy(ps []config.Policy, lset labels.Labels) *config.Policy {
	ls := make(model.LabelSet, lset.Len())
	lset.Range(func(l labels.Label) { ls[model.LabelName(l.Name)] = model.LabelValue(l.Value) })
	for i := range ps {
		if ps[i].Matches(ls) {
			return &ps[i]
		}
	}
	return nil
}

// actionFor resolves a policy's action for a target: auto takes the
// alert's suggestion, which must be one the reclaimer knows. A Slurm job's
// suggested cancel falls back to killing its processes when the reclaimer
// has no slurmrestd to ask.
func actionFor(c *config.Config, p *config.Policy, t reclaim.Target) config.Action {
	if p.Action != config.ActionAuto {
		return p.Action
	}
	switch t.Suggested {
	case config.ActionKill, config.ActionEvict, config.ActionScaleDown, config.ActionNotify:
		return t.Suggested
	case config.ActionCancel:
		if c.Slurm.On() {
			return config.ActionCancel
		}
		return config.ActionKill
	}
	return config.ActionNotify
}

// exemptByConfig says whether the config exempts a target outright.
func exemptByConfig(c *config.Config, t reclaim.Target) (bool, string) {
	switch {
	case t.Keep:
		return true, "marked gpureclaim.io/keep"
	case t.Namespace != "" && slices.Contains(c.Exemptions.Namespaces, t.Namespace):
		return true, "namespace " + t.Namespace + " is exempt"
	case t.User != "" && slices.Contains(c.Exemptions.Users, t.User):
		return true, "user " + t.User + " is exempt"
	}
	return false, ""
}

// nextInWindows returns now when now is inside one of the windows (or
// there are none), else the start of the next window.
func nextInWindows(ws []config.Window, now time.Time) time.Time {
	if len(ws) == 0 {
		return now
	}
	var next time.Time
	for _, w := range ws {
		local := now.In(w.Loc)
		minute := local.Hour()*60 + local.Minute()
		day := func(d time.Weekday) bool { return len(w.Weekdays) == 0 || w.Weekdays[d] }
		switch {
		case w.FromMin < w.ToMin && minute >= w.FromMin && minute < w.ToMin && day(local.Weekday()):
			return now
		case w.FromMin > w.ToMin && minute >= w.FromMin && day(local.Weekday()):
			return now
		case w.FromMin > w.ToMin && minute < w.ToMin && day(local.AddDate(0, 0, -1).Weekday()):
			return now // the window began yesterday
		}
		midnight := time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, w.Loc)
		for d := 0; d <= 7; d++ {
			start := midnight.AddDate(0, 0, d).Add(time.Duration(w.FromMin) * time.Minute)
			if start.After(now) && day(start.Weekday()) {
				if next.IsZero() || start.Before(next) {
					next = start
				}
				break
			}
		}
	}
	return next
}

// limited says whether one more action would break a rate limit, and when
// the oldest action in the window ages out of it.
func limited(l *config.Limit, acted []time.Time, now time.Time) (bool, time.Time) {
	if l == nil {
		return false, time.Time{}
	}
	per := time.Duration(l.Per)
	var in []time.Time
	for _, t := range acted {
		if now.Sub(t) < per {
			in = append(in, t)
		}
	}
	if len(in) < l.Max {
		return false, time.Time{}
	}
	slices.SortFunc(in, func(a, b time.Time) int { return a.Compare(b) })
	return true, in[len(in)-l.Max].Add(per)
}
