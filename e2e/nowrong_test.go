package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/sim/stack"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// The demo rules' idle threshold and the window an alert waits out
// (rules/demo.yaml: idle.threshold, idle.for).
const (
	idleThreshold = 0.05
	idleFor       = 10 * time.Second
)

// noWrongAction checks every action the reclaimer recorded against what the
// exporters said, read back from Prometheus: its alert fired when the
// action fell due, the holder was idle by the signal the alert named (its
// own share on a shared GPU) over the whole idle window before that and
// until the action was confirmed, and nothing kept it. It returns how many
// actions it checked; any violation fails the test.
func (su *suite) noWrongAction(t *testing.T) int {
	return noWrongAction(t, su.s, su.s.QueryAt)
}

// queryAt runs an instant query at a past time and returns each series'
// labels.
type queryAt func(ctx context.Context, q string, at time.Time) ([]map[string]string, error)

// noWrongAction checks the actions a stack's reclaimer recorded against
// the exporters' series that query reads.
func noWrongAction(t *testing.T, s *stack.Stack, query queryAt) int {
	items, err := s.Reclaims(ctx)
	require.NoError(t, err)
	checked := 0
	for i := range items {
		r, _, err := reclaim.FromAPI(&items[i])
		require.NoError(t, err)
		if r.DryRun || r.ActedAt.IsZero() {
			continue
		}
		for _, v := range violations(query, r) {
			t.Errorf("%s (%s, %s due %s, confirmed %s): %s", r.ID, r.Target.UnitAndHolder(), r.Action,
				r.ActAt.Format(time.RFC3339Nano), r.ActedAt.Format(time.RFC3339Nano), v)
		}
		checked++
	}
	require.Positive(t, checked, "no action was recorded")
	t.Logf("checked %d actions: none on a busy or kept holder", checked)
	return checked
}

// violations are what made an action wrong.
func violations(query queryAt, r *reclaim.Reclaim) []string {
	tg := r.Target
	holder := fmt.Sprintf("uuid=%q, namespace=%q, pod=%q, user=%q", tg.UUID, tg.Namespace, tg.Pod, tg.User)
	var out []string
	some := func(q string, at time.Time) bool {
		res, err := query(ctx, q, at)
		if err != nil {
			out = append(out, err.Error())
			return false
		}
		return len(res) > 0
	}
	if !some(fmt.Sprintf(`ALERTS{alertname=%q, alertstate="firing", %s}`, tg.Alertname, holder), r.ActAt) {
		out = append(out, tg.Alertname+" did not fire for it when the action fell due")
	}
	// From the idle window before the action fell due to its confirmation.
	w := fmt.Sprintf("%dms", (idleFor + max(0, r.ActedAt.Sub(r.ActAt))).Milliseconds())
	var busy string
	switch signal := r.Labels.Get(names.LabelSignal); signal {
	case names.SignalHolder:
		busy = fmt.Sprintf(`max_over_time(gpureclaim_unit_owner_sm_utilization_ratio{uuid=%q, namespace=%q, pod=%q}[%s]) >= %g`, tg.UUID, tg.Namespace, tg.Pod, w, idleThreshold)
	case "sm_active":
		busy = fmt.Sprintf(`max_over_time(gpureclaim_unit_sm_active_ratio{uuid=%q}[%s]) >= %g`, tg.UUID, w, idleThreshold)
	case "utilization":
		busy = fmt.Sprintf(`max_over_time(gpureclaim_unit_utilization_ratio{uuid=%q}[%s]) >= %g`, tg.UUID, w, idleThreshold)
	default:
		out = append(out, fmt.Sprintf("its alert names no signal the checker knows (%q)", signal))
	}
	if busy != "" && some(busy, r.ActedAt) {
		out = append(out, "busy between the idle window before it fell due and the action: "+busy)
	}
	if some(fmt.Sprintf(`max_over_time(gpureclaim_unit_owner_info{keep="true", %s}[%s])`, holder, w), r.ActedAt) {
		out = append(out, "kept (the exporter's keep label)")
	}
	if tg.Keep {
		out = append(out, "kept (the alert's keep label)")
	}
	return out
}
