package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kubestore"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/report"
	"github.com/gpureclaim/gpureclaim/reclaimer/route"
	rweb "github.com/gpureclaim/gpureclaim/reclaimer/web"
)

// wiring is what a term of leadership is built from: run makes it once,
// and each term builds an engine on it, serves it, and runs the engine
// and its leader jobs until the term ends.
type wiring struct {
	o          *options
	cfg        *config.Config
	st         reclaimStore
	cl         clients
	routes     *route.Router
	events     reclaim.Events
	notifiers  notifierSet
	logger     *slog.Logger
	metrics    *lifecycle.Metrics
	fail       func(string)
	reg        *prometheus.Registry
	webMetrics *rweb.Metrics // once: a replica may lead several terms
	front      *front
}

// lead runs one term: leader is nil for a replica that leads alone.
func (r *wiring) lead(ctx context.Context, leader reclaim.Leadership) error {
	defer r.front.lead(nil) // the term ends: 503 again, until the next one
	cfg, prom := r.cfg, r.cl.prom
	if leader != nil {
		r.cl.nodes.Fence, r.cl.nodes.Leading = leader.Fence, leader.Check
		if ks, ok := r.st.(*kubestore.Store); ok {
			ks.Lead(ctx, leader.Check) // the Lease lost, its writes in flight end and no other is sent
		}
	}
	eo := lifecycle.Options{
		Config: cfg, Store: r.st, Journal: r.st, Checker: r.cl.am, Inspector: r.routes, Actor: r.routes, Planner: r.routes, Restorer: r.routes, Verifier: r.routes, Events: r.events,
		Notifiers: r.notifiers.list, Clock: time.Now, Logger: r.logger, Metrics: r.metrics, Failpoint: r.fail, Leadership: leader,
	}
	if prom != nil {
		eo.Prometheus = prom
	}
	eng, err := lifecycle.New(eo)
	if err != nil {
		return err
	}
	var activity rweb.ActivityReader
	var weekly rweb.ReportBuilder
	if prom != nil {
		activity = prom
		weekly = func(ctx context.Context, window time.Duration) (report.Report, error) {
			return report.Build(ctx, prom, eng.List(), report.Options{To: time.Now(), Window: window})
		}
	}
	srv := rweb.New(rweb.Options{Config: cfg, Engine: eng, Logger: r.logger, Clock: time.Now, Registry: r.reg, Metrics: r.webMetrics,
		Ready: ready(r.st, leader), Activity: activity, Report: weekly})
	r.notifiers.mount(ctx, srv, eng)
	jobs := []lifecycle.Job{eng.PruneJob(r.o.retention)}
	if prom != nil {
		jobs = append(jobs, eng.RestoreJob(prom, time.Duration(cfg.Prometheus.Interval)))
		if cfg.Report.On() {
			jobs = append(jobs, report.WeeklyJob(cfg.Report, weekly, eng, r.logger, time.Now()))
		}
	}
	r.front.lead(srv)
	r.logger.Info("reclaimer acting", "listen", r.o.listen, "policies", len(cfg.Policies), "dry_run", cfg.DryRun, "storage", r.o.backend)
	eng.Run(ctx, r.o.step, jobs...)
	return nil
}
