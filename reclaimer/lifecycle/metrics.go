package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Metrics of the reclaimer's lifecycle.
type Metrics struct {
	alertsReceived  *prometheus.CounterVec
	decisions       *prometheus.CounterVec
	messages        *prometheus.CounterVec
	actions         *prometheus.CounterVec
	actionDuration  *prometheus.HistogramVec
	idleToAction    prometheus.Histogram
	releaseDuration *prometheus.HistogramVec
	reclaims        *prometheus.GaugeVec
	reclaimedGPUs   prometheus.Counter
	reclaimedIdle   prometheus.Counter
	errors          *prometheus.CounterVec
	breakerOpen     prometheus.Gauge
	lastStepSeconds prometheus.Gauge
	fenced          *prometheus.CounterVec
	unwritten       prometheus.Gauge
}

// NewMetrics registers the lifecycle metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		alertsReceived: f.NewCounterVec(prometheus.CounterOpts{Name: "gpureclaim_reclaimer_alerts_received_total",
			Help: "Alerts received in Alertmanager notifications, by their status (firing, resolved)."}, []string{"status"}),
		decisions: f.NewCounterVec(prometheus.CounterOpts{Name: "gpureclaim_reclaimer_decisions_total",
			Help: "Decisions on received alerts and pending reclaims."}, []string{"decision"}),
		messages: f.NewCounterVec(prometheus.CounterOpts{Name: "gpureclaim_reclaimer_messages_total",
			Help: "Messages sent to owners and admins, by notifier, kind and result."}, []string{"notifier", "kind", "result"}),
		actions: f.NewCounterVec(prometheus.CounterOpts{Name: "gpureclaim_reclaimer_actions_total",
			Help: "Actions, each counted once by its result (done: the GPU seen released; gone; not_released; dry_run; refused; failed), and retry for each attempt made again."}, []string{"action", "result"}),
		actionDuration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "gpureclaim_reclaimer_action_duration_seconds",
			Help: "Time one action took.", Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 120}}, []string{"action"}),
		idleToAction: f.NewHistogram(prometheus.HistogramOpts{Name: "gpureclaim_reclaimer_idle_to_action_seconds",
			Help:    "Time from the unit going idle to its reclaim.",
			Buckets: []float64{60, 300, 600, 900, 1200, 1800, 3600, 7200, 14400, 43200, 86400}}),
		releaseDuration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "gpureclaim_reclaimer_release_duration_seconds",
			Help:    "Time from an action carried out to the GPU seen released, by what was stopped (a top owner's kind, Pod, process, SlurmJob).",
			Buckets: []float64{1, 5, 10, 30, 60, 120, 300, 600, 1200}}, []string{"kind"}),
		reclaims: f.NewGaugeVec(prometheus.GaugeOpts{Name: "gpureclaim_reclaimer_reclaims",
			Help: "Reclaims the reclaimer knows of, by state."}, []string{"state"}),
		reclaimedGPUs: f.NewCounter(prometheus.CounterOpts{Name: "gpureclaim_reclaimer_reclaimed_gpus_total",
			Help: "GPUs reclaimed, MIG instances by their share of a GPU (a 1g slice is 1/7); a share of a GPU that others still hold through a shared ResourceClaim is not counted."}),
		reclaimedIdle: f.NewCounter(prometheus.CounterOpts{Name: "gpureclaim_reclaimer_reclaimed_gpu_seconds_total",
			Help: "Idle holding ended by reclaims: each reclaimed unit's share of a GPU times how long it had been idle."}),
		errors: f.NewCounterVec(prometheus.CounterOpts{Name: "gpureclaim_reclaimer_errors_total",
			Help: "Errors, by component (store, alertmanager, kubernetes, inspector, notifier, action, prometheus, release)."}, []string{"component"}),
		breakerOpen: f.NewGauge(prometheus.GaugeOpts{Name: "gpureclaim_reclaimer_circuit_breaker_open",
			Help: "1 while the circuit breaker holds every action because too many targets are pending."}),
		lastStepSeconds: f.NewGauge(prometheus.GaugeOpts{Name: "gpureclaim_reclaimer_last_step_timestamp_seconds",
			Help: "When the lifecycle last ran, in Unix seconds."}),
		fenced: f.NewCounterVec(prometheus.CounterOpts{Name: "gpureclaim_reclaimer_fenced_total",
			Help: "Writes, actions and messages this replica refused itself because it may no longer hold the Lease."}, []string{"what"}),
		unwritten: f.NewGauge(prometheus.GaugeOpts{Name: "gpureclaim_reclaimer_unwritten_reclaims",
			Help: "Reclaims decided from a notification and not yet written to the store; nothing is done about them until they are."}),
	}
	for _, s := range reclaim.States {
		m.reclaims.WithLabelValues(string(s))
	}
	return m
}

// Error counts an error of a component.
func (m *Metrics) Error(c reclaim.Component) { m.errors.WithLabelValues(string(c)).Inc() }

func (m *Metrics) decide(d reclaim.Decision) { m.decisions.WithLabelValues(string(d)).Inc() }

func (m *Metrics) action(action config.Action, r reclaim.ActionResult) {
	m.actions.WithLabelValues(string(action), string(r)).Inc()
}

func (m *Metrics) message(notifier string, k reclaim.MessageKind, r reclaim.MessageResult) {
	m.messages.WithLabelValues(notifier, string(k), string(r)).Inc()
}
