package backtest

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/gpureclaim/gpureclaim/internal/names"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/ruleeval"
)

// Replayer feeds a history to rule files one step at a time, as the
// exporter's series, and evaluates the rules at each step with
// Prometheus's rule manager.
type Replayer struct {
	h  *History
	ev *ruleeval.Evaluator
}

// NewReplayer opens the rules over a TSDB in dir, an empty folder.
func NewReplayer(h *History, dir string, ruleFiles ...string) (*Replayer, error) {
	files, err := withoutAnnotations(filepath.Join(dir, "rules"), ruleFiles)
	if err != nil {
		return nil, err
	}
	ev, err := ruleeval.New(filepath.Join(dir, "tsdb"), h.Step, files...)
	if err != nil {
		return nil, err
	}
	return &Replayer{h: h, ev: ev}, nil
}

// withoutAnnotations copies the rule files without the alerts'
// annotations, but for idle_for, which the reclaimer reads. Prometheus
// expands every annotation of every active alert at every evaluation; they
// change nothing of what fires and take a third of a replay's time.
func withoutAnnotations(dir string, files []string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []string
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var rgs rulefmt.RuleGroups
		if err := yaml.Unmarshal(b, &rgs); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for g := range rgs.Groups {
			for r := range rgs.Groups[g].Rules {
				rule := &rgs.Groups[g].Rules[r]
				if v, ok := rule.Annotations["idle_for"]; ok {
					rule.Annotations = map[string]string{"idle_for": v}
				} else {
					rule.Annotations = nil
				}
			}
		}
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2) // yaml.v3 writes block scalars with leading spaces wrongly at its default of 4
		if err := enc.Encode(rgs); err != nil {
			return nil, err
		}
		p := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(f)))
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Close closes the TSDB.
func (r *Replayer) Close() error { return r.ev.Close() }

// Step appends the series of the workloads that hold their unit at step i
// (holds says which of them still do), evaluates the rules at the step's
// time and returns the active alerts.
func (r *Replayer) Step(i int, holds func(w int) bool) ([]ruleeval.Alert, error) {
	ts := r.h.At(i)
	ms := ts.UnixMilli()
	app := r.ev.Appender()
	seen := map[uint64]bool{} // a unit's series appear once per step, whoever holds it
	for wi := range r.h.Workloads {
		w := &r.h.Workloads[wi]
		if !w.present(i) || !holds(wi) {
			continue
		}
		for _, s := range w.Series {
			if i >= len(s.Values) || math.IsNaN(s.Values[i]) || seen[s.Labels.Hash()] {
				continue // not sampled: a gap, as a missed scrape
			}
			seen[s.Labels.Hash()] = true
			if _, err := app.Append(0, s.Labels, ms, s.Values[i]); err != nil {
				_ = app.Rollback() // the append's error is the one to report
				return nil, fmt.Errorf("appending %s at %s: %w", s.Labels, ts, err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		return nil, err
	}
	if err := r.ev.Eval(ts); err != nil {
		return nil, err
	}
	return r.ev.Alerts(), nil
}

// AlertState is an alert's state for one workload at one step.
type AlertState uint8

const (
	Inactive AlertState = iota
	Pending
	Firing
)

// Timeline is one workload's alert states, one per step, by alert name.
type Timeline map[string][]AlertState

// ReplayRules replays the whole history through the rules, nothing
// reclaimed, and returns each workload's timeline of the alerts for the
// given audience (people or reclaimer; alerts without one count for both).
func ReplayRules(h History, dir, audience string, ruleFiles ...string) (map[string]Timeline, error) {
	r, err := NewReplayer(&h, dir, ruleFiles...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	byKey := map[string]string{}
	out := map[string]Timeline{}
	for _, w := range h.Workloads {
		byKey[w.key] = w.ID
		out[w.ID] = Timeline{}
	}
	steps := h.Steps()
	all := func(int) bool { return true }
	for step := 0; step < steps; step++ {
		alerts, err := r.Step(step, all)
		if err != nil {
			return nil, err
		}
		for _, a := range alerts {
			if aud := a.Labels.Get(names.LabelAudience); aud != "" && aud != audience {
				continue
			}
			id, ok := byKey[keyOf(a.Labels)]
			if !ok {
				continue
			}
			tl := out[id]
			if tl[a.Name] == nil {
				tl[a.Name] = make([]AlertState, steps)
			}
			st := Pending
			if a.Firing {
				st = Firing
			}
			tl[a.Name][step] = st
		}
	}
	return out, nil
}

func keyOf(l labels.Labels) string {
	return ownerKey(l.Get(names.LabelUUID), l.Get(names.LabelNamespace), l.Get(names.LabelPod), l.Get(names.LabelUser), l.Get(names.LabelSlurmJob))
}

// Stretch is a run of steps in one state.
type Stretch struct {
	Workload   string
	From, To   int // steps [From, To)
	ReturnedAt int // first step after To with activity above the threshold; -1 if none
}

// Len is the stretch's length in steps.
func (s Stretch) Len() int { return s.To - s.From }

// FiringStretches lists, per workload, the stretches in which the alert
// fired, and when work came back after each.
func FiringStretches(h History, timelines map[string]Timeline, alert string, busyAbove float64) []Stretch {
	var out []Stretch
	for _, w := range h.Workloads {
		states := timelines[w.ID][alert]
		for i := 0; i < len(states); {
			if states[i] != Firing {
				i++
				continue
			}
			j := i
			for j < len(states) && states[j] == Firing {
				j++
			}
			s := Stretch{Workload: w.ID, From: i, To: j, ReturnedAt: -1}
			for k := j; k < len(w.Activity); k++ {
				if w.busyAt(k, busyAbove) {
					s.ReturnedAt = k
					break
				}
			}
			out = append(out, s)
			i = j
		}
	}
	return out
}

// Query evaluates an instant query at step i, after Step(i).
func (r *Replayer) Query(expr string, i int) (promql.Vector, error) {
	return r.ev.Query(expr, r.h.At(i))
}
