// Package fakeclock is a clock that tests set and move.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New starts a clock at t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
