package lifecycle

import (
	"context"
	"fmt"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
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
func (e *Engine) RestoreOnDemand(ctx context.Context, q DemandQuerier) []*reclaim.Reclaim {
	now := e.now()
	var restored []*reclaim.Reclaim
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
			e.o.Metrics.Error(reclaim.ComponentPrometheus)
			log.Error("restore_when cannot be rendered for this reclaim", "err", err)
			continue
		}
		wanted, err := q.Demand(ctx, query)
		if err != nil {
			e.o.Metrics.Error(reclaim.ComponentPrometheus)
			log.Warn("restore_when query failed", "query", query, "err", err)
			continue
		}
		if !wanted {
			continue
		}
		log.Info("demand is back: restoring", "query", query, "workload", r.Stopped.String())
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
func restoreData(r *reclaim.Reclaim) config.RestoreData {
	d := config.RestoreData{}
	r.Labels.Range(func(l labels.Label) { d[l.Name] = l.Value })
	if w := r.Stopped; w != nil {
		d[config.RestoreWorkloadKind], d[config.RestoreWorkloadName], d[config.RestoreWorkloadNamespace] = w.Kind, w.Name, w.Namespace
	}
	return d
}
