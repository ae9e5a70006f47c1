package kube

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// KubeRay 1.5 acts on a RayJob's suspend only with
// shutdownAfterJobFinishes, no clusterSelector, Initializing or Running.
func TestRayJobUnsuspendable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   map[string]any
		status string
		why    string
	}{
		{"honoured while Running", map[string]any{"shutdownAfterJobFinishes": true}, "Running", ""},
		{"honoured while Initializing", map[string]any{"shutdownAfterJobFinishes": true}, "Initializing", ""},
		{"refused without shutdownAfterJobFinishes", map[string]any{}, "Running", "KubeRay refuses to suspend RayJob ml/x: its shutdownAfterJobFinishes is false"},
		{"refused on a selected cluster", map[string]any{"shutdownAfterJobFinishes": true, "clusterSelector": map[string]any{"ray.io/cluster": "shared"}}, "Running",
			"KubeRay does not suspend RayJob ml/x: it runs on a RayCluster it selects (clusterSelector)"},
		{"ignored while Waiting", map[string]any{"shutdownAfterJobFinishes": true}, "Waiting", "KubeRay ignores a suspend of RayJob ml/x while it is Waiting (it acts only while Initializing or Running)"},
		{"ignored when Complete", map[string]any{"shutdownAfterJobFinishes": true}, "Complete", "KubeRay ignores a suspend of RayJob ml/x while it is Complete (it acts only while Initializing or Running)"},
		{"ignored before KubeRay saw it", map[string]any{"shutdownAfterJobFinishes": true}, "", "KubeRay ignores a suspend of RayJob ml/x while it is new (it acts only while Initializing or Running)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "ray.io/v1", "kind": "RayJob",
				"metadata": map[string]any{"name": "x", "namespace": "ml"}, "spec": tc.spec, "status": map[string]any{"jobDeploymentStatus": tc.status}}}
			require.Equal(t, tc.why, rayJobUnsuspendable(u))
		})
	}
}

// What a controller reports is read from the status it writes.
func TestStatusFacts(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"jobDeploymentStatus": "ValidationFailed", "reason": "ValidationFailed",
		"message": "The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended",
		"conditions": []any{
			map[string]any{"type": "Suspended", "status": "False", "reason": "x"},
			map[string]any{"type": "Failed", "status": "True", "reason": "Refused", "message": "no"},
		},
	}}}
	require.Equal(t, []string{"jobDeploymentStatus ValidationFailed", "reason ValidationFailed",
		"message The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended", "Failed (Refused): no"}, statusFacts(u))
}
