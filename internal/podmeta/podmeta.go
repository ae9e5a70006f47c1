// Package podmeta finds the pod a process belongs to from the pod UID in its
// cgroup, and says whether a pod is marked to be kept.
package podmeta

import (
	"strings"
	"sync"
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
