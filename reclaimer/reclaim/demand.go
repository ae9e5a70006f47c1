package reclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
)

// DemandQuerier answers a policy's restore_when: whether the query
// returns a sample now.
type DemandQuerier interface {
	Demand(ctx context.Context, query string) (bool, error)
}

// RestoredByDemand is who a restore on demand is recorded as done by.
const RestoredByDemand = "restore_when"

// RestoreOnDemand asks, for each done reclaim that can be restored and
// whose policy has a restore_when, whether its workload is wanted again,
// and restores those that are. A reclaim is watched for the policy's
// restore_within after its action. It returns the reclaims restored.
func (e *Engine) RestoreOnDemand(ctx context.Context, q DemandQuerier) []*Reclaim {
	now := e.now()
	var restored []*Reclaim
	for _, r := range e.List() {
		if !r.Restorable() {
			continue
		}
		p := e.o.Config.Policy(r.Policy)
		if p == nil || p.RestoreWhen == "" || now.Sub(r.ActedAt) > p.RestoreWithinTime() {
			continue
		}
		log := e.o.Logger.With("id", r.ID, "policy", r.Policy)
		query, err := p.RestoreQuery(restoreData(r))
		if err != nil {
			e.o.Metrics.Error(ComponentPrometheus)
			log.Error("restore_when cannot be rendered for this reclaim", "err", err)
			continue
		}
		wanted, err := q.Demand(ctx, query)
		if err != nil {
			e.o.Metrics.Error(ComponentPrometheus)
			log.Warn("restore_when query failed", "query", query, "err", err)
			continue
		}
		if !wanted {
			continue
		}
		log.Info("demand is back: restoring", "query", query, "workload", r.Workload.String())
		done, err := e.restore(ctx, r.ID, fmt.Sprintf("%s (%s)", RestoredByDemand, query))
		if err != nil {
			log.Warn("restore on demand failed; trying again next interval", "err", err)
			continue
		}
		restored = append(restored, done)
	}
	return restored
}

// restoreData is what a restore_when template reads of a reclaim.
func restoreData(r *Reclaim) config.RestoreData {
	d := config.RestoreData{}
	for k, v := range r.Labels {
		d[k] = v
	}
	if w := r.Workload; w != nil {
		d[config.RestoreWorkloadKind], d[config.RestoreWorkloadName], d[config.RestoreWorkloadNamespace] = w.Kind, w.Name, w.Namespace
	}
	return d
}

// wanted asks Prometheus whether pending work wants a GPU of the target's
// kind (config.WantedQuery).
func (e *Engine) wanted(ctx context.Context, r *Reclaim) (bool, error) {
	if e.o.Prometheus == nil {
		return false, errors.New("no Prometheus is configured to ask")
	}
	return e.o.Prometheus.Demand(ctx, config.WantedQuery(r.Target.Kind, r.Target.MIGProfile))
}

// demandGrace is the policy's grace while GPUs of the kind are wanted,
// when it is shorter and they are wanted now.
func (e *Engine) demandGrace(ctx context.Context, r *Reclaim, p *config.Policy) (time.Duration, bool) {
	if p.Demand == nil || p.Demand.Grace == nil || p.Demand.GraceTime() >= p.GraceTime() {
		return 0, false
	}
	wanted, err := e.wanted(ctx, r)
	if err != nil {
		e.o.Metrics.Error(ComponentPrometheus)
		e.o.Logger.Warn("cannot tell whether GPUs of the kind are wanted: the whole grace applies", "reclaim", r.ID, "err", err)
		return 0, false
	}
	return p.Demand.GraceTime(), wanted
}

// awaitDemand holds a due action of a policy that requires demand until
// GPUs of the target's kind are wanted; it says whether the action may go.
func (e *Engine) awaitDemand(ctx context.Context, r *Reclaim, p *config.Policy) bool {
	if p.Demand == nil || !p.Demand.Required {
		return true
	}
	now := e.now()
	wanted, err := e.wanted(ctx, r)
	switch {
	case err != nil:
		e.o.Metrics.Error(ComponentPrometheus)
		e.deferTo(r.ID, now.Add(dependencyWait), "cannot tell whether GPUs of its kind are wanted: "+err.Error())
		return false
	case !wanted:
		e.deferTo(r.ID, now.Add(time.Duration(e.o.Config.Prometheus.Interval)), "waiting until a GPU of its kind is wanted: no pending work asks for one")
		e.o.Metrics.decide(DecisionNoDemand)
		return false
	}
	return true
}
