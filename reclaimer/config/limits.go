package config

import (
	"fmt"
	"regexp"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Exemptions are never reclaimed, whatever the policy says.
type Exemptions struct {
	// Namespaces whose pods are never reclaimed.
	Namespaces []string `yaml:"namespaces"`
	// Users (Unix, on bare metal) whose processes are never reclaimed.
	Users []string `yaml:"users"`
}

// RateLimits bound how many actions are taken per window.
type RateLimits struct {
	// Global bounds the actions of the whole fleet. Default none.
	Global *Limit `yaml:"global"`
	// PerNamespace bounds each namespace's. Default none.
	PerNamespace *Limit `yaml:"per_namespace"`
}

// Limit is at most Max actions per Per.
type Limit struct {
	// Max is the most actions a window holds, at least 1.
	Max int `yaml:"max"`
	// Per is the window, sliding: an action counts for Per after it.
	Per Duration `yaml:"per"`
}

// CircuitBreaker stops all actions while too many targets are pending at
// once (a broken exporter or rule would otherwise empty the cluster) and
// tells the admins.
type CircuitBreaker struct {
	// MaxPending opens the breaker. 0 turns it off. Default 50.
	MaxPending *int `yaml:"max_pending"`
}

func (e *Exemptions) validate(c *checker) {
	for i, ns := range e.Namespaces {
		if !dnsLabel.MatchString(ns) {
			c.errorf(fmt.Sprintf("exemptions.namespaces[%d]", i), "%q is not a namespace name", ns)
		}
	}
}

func (r *RateLimits) validate(c *checker) {
	for _, lim := range []struct {
		name string
		l    *Limit
	}{{"rate_limits.global", r.Global}, {"rate_limits.per_namespace", r.PerNamespace}} {
		name, l := lim.name, lim.l
		if l == nil {
			continue
		}
		if l.Max < 1 {
			c.errorf(name+".max", "%d; allow at least 1 action (or leave the limit out)", l.Max)
		}
		if l.Per <= 0 {
			c.errorf(name+".per", "must be a positive duration (e.g. 1h)")
		}
	}
}

func (b *CircuitBreaker) validate(c *checker) {
	if b.MaxPending == nil {
		def := 50
		b.MaxPending = &def
	}
	if *b.MaxPending < 0 {
		c.errorf("circuit_breaker.max_pending", "must not be negative (0 turns the breaker off)")
	}
}
