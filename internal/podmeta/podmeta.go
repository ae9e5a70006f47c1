// Package podmeta finds the pod a process belongs to from the pod UID in its
// cgroup, and says whether a pod is marked to be kept.
package podmeta

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// KeepKey marks a pod (label or annotation) or a namespace whose GPUs are
// never reclaimed: "true" keeps them.
const KeepKey = "gpureclaim.io/keep"

// OwnerKey is the pod or namespace annotation that names who to tell about a
// pod's GPUs: a Slack user id or an e-mail address.
const OwnerKey = "gpureclaim.io/owner"

// Pod is what the exporter needs to know of a pod.
type Pod struct {
	Namespace, Name, UID string
	// Keep is set when the pod is marked to be kept.
	Keep bool
	// Containers maps container runtime ids (no "containerd://" prefix) to names.
	Containers map[string]string
}

// Resolver finds pods by UID or by name.
type Resolver interface {
	PodByUID(uid string) (Pod, bool)
	PodByName(namespace, name string) (Pod, bool)
}

// Kept says whether labels or annotations mark an object to be kept.
func Kept(labels, annotations map[string]string) bool {
	for _, m := range []map[string]string{labels, annotations} {
		switch strings.ToLower(strings.TrimSpace(m[KeepKey])) {
		case "true", "yes", "1":
			return true
		}
	}
	return false
}

// Static is a Resolver over a fixed or replaced set of pods.
type Static struct {
	mu     sync.RWMutex
	byUID  map[string]Pod
	byName map[string]Pod
}

// NewStatic returns a resolver over pods.
func NewStatic(pods []Pod) *Static {
	s := &Static{}
	s.Replace(pods)
	return s
}

// Replace swaps the set of pods.
func (s *Static) Replace(pods []Pod) {
	byUID, byName := make(map[string]Pod, len(pods)), make(map[string]Pod, len(pods))
	for _, p := range pods {
		byUID[p.UID] = p
		byName[p.Namespace+"/"+p.Name] = p
	}
	s.mu.Lock()
	s.byUID, s.byName = byUID, byName
	s.mu.Unlock()
}

func (s *Static) PodByUID(uid string) (Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.byUID[uid]
	return p, ok
}

func (s *Static) PodByName(namespace, name string) (Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.byName[namespace+"/"+name]
	return p, ok
}

// Lister lists a node's pods (internal/kubeapi's NodePods).
type Lister func(ctx context.Context) ([]Pod, error)

// Listed is a Resolver over a node's pods as a Lister last gave them,
// listed again every interval, and sooner (at most every minGap) when
// asked for a UID it does not know: a pod that started since.
type Listed struct {
	*Static
	list          Lister
	every, minGap time.Duration
	kick          chan struct{}
	mu            sync.Mutex
	err           error // of the last list; errNotListed before the first
}

var errNotListed = errors.New("the node's pods have not been listed yet")

// NewListed returns a resolver that knows no pod until Run lists them.
func NewListed(list Lister, every, minGap time.Duration) *Listed {
	return &Listed{Static: NewStatic(nil), list: list, every: every, minGap: minGap, kick: make(chan struct{}, 1), err: errNotListed}
}

// Run lists the pods until ctx ends; log hears a failure once, until a
// list succeeds again.
func (l *Listed) Run(ctx context.Context, log *slog.Logger) {
	t := time.NewTimer(0)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
			if wait := l.minGap - time.Since(last); wait > 0 {
				t.Reset(wait)
				continue
			}
		}
		last = time.Now()
		pods, err := l.list(ctx)
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		was := l.err
		l.err = err
		l.mu.Unlock()
		switch {
		case err == nil:
			l.Replace(pods)
			if was != nil && !errors.Is(was, errNotListed) {
				log.Info("listing the node's pods works again", "pods", len(pods))
			}
		case was == nil || errors.Is(was, errNotListed):
			// The last pods stay: an apiserver outage must not unname them.
			log.Warn("listing the node's pods failed: processes of pods not listed before are not attributed", "err", err)
		}
		t.Reset(l.every)
	}
}

// Err is the last list's error, nil when it succeeded.
func (l *Listed) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// PodByUID finds a listed pod; a UID it does not know asks for a list.
func (l *Listed) PodByUID(uid string) (Pod, bool) {
	p, ok := l.Static.PodByUID(uid)
	if !ok {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return p, ok
}
