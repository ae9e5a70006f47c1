package loop_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/loop"
)

// The first run is at once; it runs again each interval and stops with
// its context.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	runs := make(chan struct{}, 100)
	done := make(chan struct{})
	go func() {
		loop.Every(ctx, time.Millisecond, func() { runs <- struct{}{} })
		close(done)
	}()
	<-runs
	<-runs
	cancel()
	<-done
	n := len(runs)
	select {
	case <-runs:
	default:
	}
	require.LessOrEqual(t, len(runs), n, "nothing runs after the context ends")
}
