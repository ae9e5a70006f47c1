package slack

import (
	"context"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// SetSleep replaces the notifier's waits between retries.
func SetSleep(n *Notifier, f func(context.Context, time.Duration) error) { n.sleep = f }

// Limits reports the rate limiter's spacing and burst.
func Limits(n *Notifier) (time.Duration, int) {
	return time.Duration(float64(time.Second) / float64(n.limit.Limit())), n.limit.Burst()
}

// AlreadyForTest is a button's answer when the reclaim has moved on.
func AlreadyForTest(r *reclaim.Reclaim) string { return (&Interactions{}).already(r) }
