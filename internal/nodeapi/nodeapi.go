// Package nodeapi holds the wire types of the node action endpoint
// (GET /api/v1/units/{uuid}, POST /api/v1/units/{uuid}/kill), which the
// exporter serves and the reclaimer calls: each side imports these and
// nothing of the other.
package nodeapi

import "time"

// Process is a process on a unit, as the endpoint reports and accepts it.
type Process struct {
	PID       int       `json:"pid"`
	StartTime time.Time `json:"start_time"`
	User      string    `json:"user,omitempty"`
	Name      string    `json:"name,omitempty"`
	SlurmJob  string    `json:"slurm_job,omitempty"`
	PodUID    string    `json:"pod_uid,omitempty"`
}

// Idleness is what the node's own recent samples say of a unit.
type Idleness struct {
	Idle bool `json:"idle"`
	// Known is false when the history does not yet cover the window.
	Known   bool      `json:"known"`
	Max     float64   `json:"max_activity"`
	Since   time.Time `json:"since,omitzero"`
	Samples int       `json:"samples"`
}

// Unit is the answer to GET.
type Unit struct {
	UUID      string    `json:"uuid"`
	Node      string    `json:"node"`
	Idleness  Idleness  `json:"idleness"`
	Processes []Process `json:"processes"`
}

// KillRequest names the processes to end.
type KillRequest struct {
	Processes []Process `json:"processes"`
	Reason    string    `json:"reason"`
	// Lease names the reclaimers' Lease (namespace/name/uid) and Fence the
	// sender's term of it: the node refuses a term older than the newest
	// it has seen of that Lease. Empty: one replica, no election.
	Lease string `json:"lease,omitempty"`
	Fence int64  `json:"fence,omitempty"`
}

// KillResult says what happened to each: 200 with killed and gone; 409
// with error when the node refuses (busy, other processes, exempt); 503
// with Retry-After while another kill runs or its history is too short.
type KillResult struct {
	Killed []int  `json:"killed"`
	Gone   []int  `json:"gone"`
	Error  string `json:"error,omitempty"`
	// Node names the node that answers that it has no such unit: the
	// reclaimer believes "gone" only from the unit's own node.
	Node string `json:"node,omitempty"`
}
