package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// errNothingToAsk is the fact a reclaimer without an inspector cannot
// look up: the action decides on the pod alone.
var errNothingToAsk = errors.New("nothing is configured to ask")

// verdict decides on r, looking up each fact decide asks for, in the
// order it asks.
func (e *Engine) verdict(ctx context.Context, r *reclaim.Reclaim) Verdict {
	p := e.policy(r)
	f := Facts{Now: e.now()}
	asked := map[Need]bool{}
	for {
		v := decide(r, p, e.o.Config, f)
		if v.Do != DoGather {
			return v
		}
		if asked[v.Need] {
			panic(fmt.Sprintf("decide asked twice for the %s: gather does not look it up", v.Need))
		}
		asked[v.Need] = true
		e.gather(ctx, r, v.Need, &f)
	}
}

// gather looks up one fact about r's target: the one place the engine
// asks Kubernetes, the nodes, Alertmanager and Prometheus before it
// decides. A lookup that fails is a fact too (decide waits, or goes on
// without it); it is counted and logged here.
func (e *Engine) gather(ctx context.Context, r *reclaim.Reclaim, n Need, f *Facts) {
	log := func(c reclaim.Component, err error) {
		e.o.Metrics.Error(c)
		e.o.Logger.Warn("looking up the "+n.String()+" failed", "reclaim", r.ID, "err", err)
	}
	in := e.o.Inspector
	switch n {
	case NeedKept:
		k := &Fact[Keep]{}
		if in != nil {
			if k.Value.Kept, k.Value.Why, k.Err = in.Kept(ctx, r.Target); k.Err != nil {
				log(reclaim.ComponentKubernetes, k.Err)
			}
		}
		f.Kept = k
	case NeedTopOwner:
		o := &Fact[reclaim.TopOwner]{Err: errNothingToAsk}
		if in != nil {
			if o.Value, o.Err = in.TopOwner(ctx, r.Target); o.Err != nil && !errors.Is(o.Err, reclaim.ErrGone) {
				log(reclaim.ComponentKubernetes, o.Err)
			}
		}
		f.TopOwner = o
	case NeedStarted:
		s := &Fact[time.Time]{}
		if in != nil {
			if s.Value, s.Err = in.Started(ctx, r.Target); s.Err != nil && !errors.Is(s.Err, reclaim.ErrGone) {
				log(reclaim.ComponentInspector, s.Err)
			}
		}
		f.Started = s
	case NeedWanted:
		w := &Fact[bool]{}
		if e.o.Prometheus == nil {
			w.Err = errors.New("no Prometheus is configured to ask")
		} else {
			w.Value, w.Err = e.o.Prometheus.Demand(ctx, config.WantedQuery(r.Target.Kind, r.Target.MIGProfile))
		}
		if w.Err != nil {
			log(reclaim.ComponentPrometheus, w.Err)
		}
		f.Wanted = w
	case NeedBreaker:
		e.mu.Lock()
		f.Breaker = &Fact[bool]{Value: e.breaker}
		e.mu.Unlock()
	case NeedActed:
		f.Acted = &Fact[Acted]{Value: e.acted(r.Target.Namespace)}
	case NeedAlert:
		a := &Fact[reclaim.AlertCheck]{Value: reclaim.AlertCheck{Status: reclaim.AlertActive}}
		if e.o.Checker != nil {
			if a.Value, a.Err = e.o.Checker.Check(ctx, r); a.Err != nil {
				log(reclaim.ComponentAlertmanager, a.Err)
			}
		}
		f.Alert = a
	case NeedRelease:
		f.Release = &Fact[reclaim.Release]{Value: e.look(ctx, r, false)}
	}
}

// acted lists when actions were taken, by the fleet and in a namespace.
func (e *Engine) acted(namespace string) Acted {
	e.mu.Lock()
	defer e.mu.Unlock()
	var a Acted
	for _, r := range e.ledger.All() {
		if (r.State == reclaim.Done || r.State == reclaim.NotReleased || r.State == reclaim.Acting) && !r.ActedAt.IsZero() {
			a.Fleet = append(a.Fleet, r.ActedAt)
			if namespace != "" && r.Target.Namespace == namespace {
				a.Namespace = append(a.Namespace, r.ActedAt)
			}
		}
	}
	return a
}
