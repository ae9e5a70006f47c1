package lifecycle

import (
	"time"
)

// The engine's retry policy: how often it tries each kind of work and how
// long it waits between tries. Every wait and limit of the engine is here.
const (
	// backoffBase doubles with each attempt, up to backoffMax.
	backoffBase = time.Second
	backoffMax  = 5 * time.Minute

	// actionAttemptsUnknown is how often an action that failed with an
	// error nobody said is worth retrying is tried before it fails for good.
	actionAttemptsUnknown = 5
	// actionAttemptsRetryable is the same for errors the actor marked
	// retryable (a node busy with another action, an apiserver conflict),
	// each after the wait the actor asked for.
	actionAttemptsRetryable = 20
	// finalMessageAttempts is how often an outcome is sent before it is
	// given up: the action is done either way and stays recorded.
	finalMessageAttempts = 10

	// heldWait is how long a due action waits while it cannot run yet
	// (the circuit breaker is open, the workload's start is unknown).
	heldWait = time.Minute
	// dependencyWait is how long work waits after Alertmanager or the
	// apiserver could not be asked.
	dependencyWait = 30 * time.Second
	// inhibitedWait is how long a reclaim whose alert is inhibited (silenced
	// with no end) waits before the reclaimer looks again.
	inhibitedWait = 5 * time.Minute
)

// backoff is the wait after the given number of failed attempts.
func backoff(attempts int) time.Duration {
	return min(backoffBase<<min(attempts, 8), backoffMax)
}
