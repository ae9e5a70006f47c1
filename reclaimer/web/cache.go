package web

import (
	"context"
	"sync"
	"time"
)

// answers keeps the answers of an endpoint that asks Prometheus (the
// activity probe, the report) per key for ttl, and asks once for all the
// requests that want the same key at the same time: a probe in every
// notebook pod, or a report of 90 days asked twice, costs Prometheus one
// query per key and window. Failures are not kept.
type answers[V any] struct {
	ttl     time.Duration
	max     int
	clock   func() time.Time
	mu      sync.Mutex
	kept    map[string]kept[V]
	pending map[string]*pending[V]
}

type kept[V any] struct {
	v  V
	at time.Time
}

type pending[V any] struct {
	done chan struct{}
	v    V
	err  error
}

func newAnswers[V any](ttl time.Duration, max int, clock func() time.Time) *answers[V] {
	if clock == nil {
		clock = time.Now
	}
	return &answers[V]{ttl: ttl, max: max, clock: clock, kept: map[string]kept[V]{}, pending: map[string]*pending[V]{}}
}

// get answers key from what is kept, from a question already asked, or by
// asking.
func (a *answers[V]) get(ctx context.Context, key string, ask func(context.Context) (V, error)) (V, error) {
	a.mu.Lock()
	now := a.clock()
	if k, ok := a.kept[key]; ok && now.Sub(k.at) < a.ttl {
		a.mu.Unlock()
		return k.v, nil
	}
	if p, ok := a.pending[key]; ok {
		a.mu.Unlock()
		select {
		case <-p.done:
			return p.v, p.err
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
	}
	p := &pending[V]{done: make(chan struct{})}
	a.pending[key] = p
	a.mu.Unlock()

	// The question outlives a client that leaves: others may wait on it.
	p.v, p.err = ask(context.WithoutCancel(ctx))
	a.mu.Lock()
	delete(a.pending, key)
	if p.err == nil {
		if len(a.kept) >= a.max {
			a.dropStale(now)
		}
		if len(a.kept) < a.max {
			a.kept[key] = kept[V]{v: p.v, at: now}
		}
	}
	a.mu.Unlock()
	close(p.done)
	return p.v, p.err
}

// dropStale forgets the answers past their ttl.
func (a *answers[V]) dropStale(now time.Time) {
	for k, e := range a.kept {
		if now.Sub(e.at) >= a.ttl {
			delete(a.kept, k)
		}
	}
}
