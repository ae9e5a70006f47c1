// Package ruleeval evaluates Prometheus rule files over recorded series with
// Prometheus's own rule manager, PromQL engine and TSDB, on a simulated
// clock: the rules behave exactly as in Prometheus (for, lookback,
// staleness, recorded series read by later rules), minutes of history take
// milliseconds.
package ruleeval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Evaluator holds a TSDB, the rule groups and the time of the last evaluation.
type Evaluator struct {
	db     *tsdb.DB
	engine *promql.Engine
	groups []*rules.Group
	ctx    context.Context
}

// New opens a TSDB in dir (a fresh folder) and loads the rule files,
// evaluated every interval.
func New(dir string, interval time.Duration, files ...string) (*Evaluator, error) {
	return NewWithQuery(dir, interval, nil, files...)
}

// NewWithQuery is New with the rules' queries answered by query (another
// engine, as Thanos Ruler asks Thanos Query); nil is Prometheus's engine
// over the TSDB. The rules' results are written to the TSDB either way.
func NewWithQuery(dir string, interval time.Duration, query rules.QueryFunc, files ...string) (*Evaluator, error) {
	opts := tsdb.DefaultOptions()
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	if err != nil {
		return nil, err
	}
	// History is appended in order and read back whole: no need to compact.
	db.DisableCompactions()
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples:           100_000_000,
		Timeout:              time.Minute,
		LookbackDelta:        5 * time.Minute,
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
	})
	ctx := context.Background()
	if query == nil {
		query = rules.EngineQueryFunc(engine, db)
	}
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    query,
		AppendableV2: db,
		Context:      ctx,
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
	})
	loaded, errs := m.LoadGroups(interval, labels.EmptyLabels(), "", nil, false, files...)
	if len(errs) > 0 {
		db.Close()
		return nil, errors.Join(errs...)
	}
	e := &Evaluator{db: db, engine: engine, ctx: ctx}
	// The groups in the order the files list them, as promtool's
	// group_eval_order would have them: a group that reads another's
	// records comes after it.
	var keys []string
	for _, f := range files {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			db.Close()
			return nil, errors.Join(errs...)
		}
		for _, g := range rgs.Groups {
			keys = append(keys, rules.GroupKey(f, g.Name))
		}
	}
	for _, k := range keys {
		g := loaded[k]
		for _, r := range g.AlertingRules() {
			r.SetRestored(true) // no earlier state to restore from
		}
		e.groups = append(e.groups, g)
	}
	return e, nil
}

// Close closes the TSDB.
func (e *Evaluator) Close() error { return e.db.Close() }

// Appender appends input samples; Commit before the next Eval.
func (e *Evaluator) Appender() storage.Appender { return e.db.Appender(e.ctx) }

// Eval evaluates every group at ts, in order. It fails on the first rule
// that could not be evaluated.
func (e *Evaluator) Eval(ts time.Time) error { return e.EvalEach(ts, nil) }

// EvalEach is Eval, calling after with each group's rules once the group
// is evaluated (to pass its results on before the next group reads them).
func (e *Evaluator) EvalEach(ts time.Time, after func([]rules.Rule) error) error {
	for _, g := range e.groups {
		g.Eval(e.ctx, ts)
		for _, r := range g.Rules() {
			if err := r.LastError(); err != nil {
				return fmt.Errorf("rule %s at %s: %w", r.Name(), ts.UTC().Format(time.RFC3339), err)
			}
		}
		if after != nil {
			if err := after(g.Rules()); err != nil {
				return err
			}
		}
	}
	return nil
}

// Sample is one sample of a series.
type Sample struct {
	Labels labels.Labels
	T      int64
	F      float64
}

// At reads the samples written at ts (in milliseconds) of the series
// named name, as they are stored: stale markers too.
func (e *Evaluator) At(name string, ts int64) ([]Sample, error) {
	q, err := e.db.Querier(ts, ts)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	set := q.Select(e.ctx, false, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, name))
	var out []Sample
	for set.Next() {
		s := set.At()
		it := s.Iterator(nil)
		for it.Next() != chunkenc.ValNone {
			if t, v := it.At(); t == ts {
				out = append(out, Sample{Labels: s.Labels(), T: t, F: v})
			}
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
	}
	return out, set.Err()
}

// Alert is an active alert after the last Eval.
type Alert struct {
	Name        string
	Firing      bool
	Labels      labels.Labels
	Annotations labels.Labels
	ActiveAt    time.Time
	Value       float64
}

// Alerts lists the active (pending and firing) alerts.
func (e *Evaluator) Alerts() []Alert {
	var out []Alert
	for _, g := range e.groups {
		for _, r := range g.AlertingRules() {
			for _, a := range r.ActiveAlerts() {
				out = append(out, Alert{Name: r.Name(), Firing: a.State == rules.StateFiring, Labels: a.Labels, Annotations: a.Annotations, ActiveAt: a.ActiveAt, Value: a.Value})
			}
		}
	}
	return out
}

// Query evaluates an instant query at ts.
func (e *Evaluator) Query(expr string, ts time.Time) (promql.Vector, error) {
	q, err := e.engine.NewInstantQuery(e.ctx, e.db, nil, expr, ts)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(e.ctx)
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Vector()
}
