// Package loop runs the binaries' periodic work: the exporter's samples,
// the simulator's pod watch, the reclaimer's restores, prunes and reports.
package loop

import (
	"context"
	"time"
)

// Every runs f at once, then every interval, until ctx ends. A run that
// takes longer than the interval delays the next, and ticks missed
// meanwhile are dropped.
func Every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
