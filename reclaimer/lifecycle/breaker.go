package lifecycle

import (
	"fmt"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// updateBreaker opens the breaker while too many targets wait for an
// action, and closes it once they are fewer. The caller holds e.mu.
func (e *Engine) updateBreaker() string {
	max := *e.o.Config.CircuitBreaker.MaxPending
	if max == 0 {
		return ""
	}
	n := 0
	for _, r := range e.ledger.All() {
		if r.State == reclaim.Pending && !r.DryRun {
			n++
		}
	}
	switch {
	case !e.breaker && n >= max:
		e.breaker = true
		e.o.Metrics.breakerOpen.Set(1)
		e.o.Logger.Warn("circuit breaker open: holding every action", "pending", n, "max_pending", max)
		return fmt.Sprintf("Circuit breaker open: %d targets are pending at once (max_pending %d). No GPU will be reclaimed until they are fewer; check the exporters and the rules before anything else.", n, max)
	case e.breaker && n < max:
		e.breaker = false
		e.o.Metrics.breakerOpen.Set(0)
		e.o.Logger.Info("circuit breaker closed", "pending", n)
		return fmt.Sprintf("Circuit breaker closed: %d targets pending. Reclaims resume.", n)
	}
	return ""
}

// BreakerOpen says whether the circuit breaker holds the actions.
func (e *Engine) BreakerOpen() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.breaker
}
