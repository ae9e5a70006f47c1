package reclaim

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Clone copies everything, and shares nothing a later change could reach
// through the copy.
func TestCloneIsDeep(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r := &Reclaim{
		ID: "fp-1", Fingerprint: "fp", StartsAt: now, Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
		Target: Target{UUID: "GPU-1", Node: "n1", Namespace: "ml", Pod: "p"}, Policy: "idle", Action: "stop", State: Done,
		Created: now, ActAt: now, ActedAt: now, ActingSince: now,
		Warning:  Delivery{Sent: true, At: now, Refs: map[string]string{"slack.ts": "1"}, Channels: []string{"D0"}},
		Final:    Delivery{Refs: map[string]string{"x": "y"}, Channels: []string{"C0"}},
		TopOwner: &TopOwner{Kind: "Job", Name: "train"},
		Workload: &Workload{Kind: "Job", Name: "train", Stop: StopPatch},
		Killed:   []int{1, 2},
	}
	c := r.Clone()
	want, _ := json.Marshal(r)
	got, _ := json.Marshal(c)
	require.JSONEq(t, string(want), string(got), "every field copied")

	c.Labels["a"], c.Annotations["c"] = "changed", "changed"
	c.Warning.Refs["slack.ts"], c.Final.Refs["x"] = "changed", "changed"
	c.Warning.Channels[0], c.Killed[0] = "changed", 99
	c.TopOwner.Name, c.Workload.Name = "changed", "changed"
	after, _ := json.Marshal(r)
	require.JSONEq(t, string(want), string(after), "the original is untouched")
}
