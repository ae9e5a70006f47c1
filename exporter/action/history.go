package action

import (
	"sync"
	"time"

	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/internal/nodeapi"
)

// History keeps each unit's recent activity, so the node can check for
// itself that a unit is idle before it signals anything.
type History struct {
	window time.Duration

	mu    sync.Mutex
	units map[string][]reading
}

type reading struct {
	at       time.Time
	activity float64
}

// NewHistory keeps readings for window.
func NewHistory(window time.Duration) *History {
	return &History{window: window, units: map[string][]reading{}}
}

// Record takes the activity of every unit of a snapshot: SM activity where
// the GPU has GPM, utilization otherwise, as the rules do.
func (h *History) Record(s *sampler.Snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for i := range s.GPUs {
		for j := range s.GPUs[i].Units {
			u := &s.GPUs[i].Units[j]
			a := u.SMActive
			if !a.OK {
				a = u.Utilization
			}
			if !a.OK {
				continue
			}
			seen[u.UUID] = true
			rs := append(h.units[u.UUID], reading{at: s.Time, activity: a.V})
			// Keep twice the window: the readings before it show that the
			// history reaches back that far.
			for len(rs) > 0 && s.Time.Sub(rs[0].at) > 2*h.window {
				rs = rs[1:]
			}
			h.units[u.UUID] = rs
		}
	}
	for uuid := range h.units {
		if !seen[uuid] {
			delete(h.units, uuid)
		}
	}
}

// Check says whether every reading of the last window is below threshold.
func (h *History) Check(uuid string, threshold float64, now time.Time) nodeapi.Idleness {
	h.mu.Lock()
	defer h.mu.Unlock()
	rs := h.units[uuid]
	var out nodeapi.Idleness
	reaches := false
	for _, r := range rs {
		if now.Sub(r.at) >= h.window*8/10 {
			reaches = true
		}
		if now.Sub(r.at) > h.window {
			continue
		}
		if out.Samples == 0 {
			out.Since = r.at
		}
		out.Samples++
		out.Max = max(out.Max, r.activity)
	}
	// The readings must reach back most of the window: a restarted
	// exporter knows too little to vouch for an idle unit.
	out.Known = out.Samples >= 2 && reaches
	out.Idle = out.Known && out.Max < threshold
	return out
}
