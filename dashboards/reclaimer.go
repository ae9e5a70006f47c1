package dashboards

// reclaimer is the reclaimer's dashboard: what it decided, warned, did and
// freed, and how its parts are doing.
func reclaimer() *layout {
	l := newLayout(ReclaimerUID, "gpureclaim / Reclaimer",
		"What the reclaimer decided, warned, did and freed, and how its parts are doing.")
	l.row("Now")
	add(l, statPanel("Pending reclaims", "Owners warned; the unit is reclaimed after the grace unless it is used again.", "short", `sum(gpureclaim_reclaimer_reclaims{state="pending"})`), 4, 5)
	add(l, statPanel("Snoozed", "Reclaims held by a silence (a snooze or keep from Slack).", "short", `sum(gpureclaim_reclaimer_reclaims{state="snoozed"})`), 4, 5)
	add(l, statPanel("Circuit breaker", "1 while too many targets are pending and every action is held.", "bool", `max(gpureclaim_reclaimer_circuit_breaker_open)`), 4, 5)
	add(l, statPanel("GPUs reclaimed", "GPUs reclaimed in the time range, MIG instances by their share.", "short", `sum(increase(gpureclaim_reclaimer_reclaimed_gpus_total[$__range]))`), 4, 5)
	add(l, statPanel("Idle GPU-hours ended", "Idle holding the reclaims ended: each unit's share of a GPU times how long it had been idle.", "h", `sum(increase(gpureclaim_reclaimer_reclaimed_gpu_seconds_total[$__range])) / 3600`), 4, 5)
	add(l, statPanel("Failed actions", "Actions that failed for good in the time range.", "short", `sum(increase(gpureclaim_reclaimer_actions_total{result="failed"}[$__range])) or vector(0)`), 4, 5)

	l.row("What it did")
	add(l, series("Messages sent", "Warnings, notices and outcomes sent to owners and admins, per second.", "reqps",
		Target{Expr: `sum by (kind) (rate(gpureclaim_reclaimer_messages_total{result="sent"}[$__rate_interval]))`, LegendFormat: "{{kind}}"},
		Target{Expr: `sum by (notifier) (rate(gpureclaim_reclaimer_messages_total{result="error"}[$__rate_interval])) or vector(0)`, LegendFormat: "failed: {{notifier}}"}), 12, 8)
	add(l, series("Actions", "Actions per second, by action and result.", "ops",
		Target{Expr: `sum by (action, result) (rate(gpureclaim_reclaimer_actions_total[$__rate_interval]))`, LegendFormat: "{{action}} {{result}}"}), 12, 8)
	add(l, series("Decisions", "What the policy decided, per second.", "ops",
		Target{Expr: `sum by (decision) (rate(gpureclaim_reclaimer_decisions_total[$__rate_interval]))`, LegendFormat: "{{decision}}"}), 12, 8)
	add(l, series("Reclaims by state", "Reclaims the reclaimer holds.", "short",
		Target{Expr: `sum by (state) (gpureclaim_reclaimer_reclaims)`, LegendFormat: "{{state}}"}), 12, 8)

	l.row("How long it takes")
	add(l, series("Idle to reclaimed", "Time from a unit going idle to its reclaim: the idle threshold's window, the grace and any deferral.", "s",
		Target{Expr: `histogram_quantile(0.5, sum by (le) (rate(gpureclaim_reclaimer_idle_to_action_seconds_bucket[$__rate_interval])))`, LegendFormat: "median"},
		Target{Expr: `histogram_quantile(0.9, sum by (le) (rate(gpureclaim_reclaimer_idle_to_action_seconds_bucket[$__rate_interval])))`, LegendFormat: "90th percentile"}), 12, 8)
	add(l, series("Action latency", "Time one action took (an eviction, a scale-down, a kill with its checkpoint grace).", "s",
		Target{Expr: `histogram_quantile(0.9, sum by (le, action) (rate(gpureclaim_reclaimer_action_duration_seconds_bucket[$__rate_interval])))`, LegendFormat: "{{action}} p90"}), 12, 8)

	l.row("Health")
	add(l, series("Errors", "Errors per second, by component.", "reqps",
		Target{Expr: `sum by (component) (rate(gpureclaim_reclaimer_errors_total[$__rate_interval])) or vector(0)`, LegendFormat: "{{component}}"}), 12, 7)
	add(l, series("Webhook requests", "Alertmanager's notifications by status code: 4xx are never retried, 5xx are.", "reqps",
		Target{Expr: `sum by (code) (rate(gpureclaim_reclaimer_http_requests_total{handler="webhook"}[$__rate_interval]))`, LegendFormat: "{{code}}"}), 12, 7)
	return l
}
