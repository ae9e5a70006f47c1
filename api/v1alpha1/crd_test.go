package v1alpha1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// The chart's CRD is what controller-gen writes from these types: a field
// added to the types and not to the CRD would be pruned by the apiserver.
// `make crds` writes it.
func TestCRDIsGeneratedFromTheTypes(t *testing.T) {
	root := tooltest.Root(t)
	cmd := exec.Command(tooltest.Bin(t, "controller-gen"), "crd:crdVersions=v1", "paths=./api/...", "output:stdout")
	cmd.Dir = root
	generated, err := cmd.Output()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "deploy/helm/gpureclaim/crds/gpureclaims.gpureclaim.io.yaml"))
	require.NoError(t, err)
	var body []string
	for i, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			body = strings.SplitAfter(string(b), "\n")[i:]
			break
		}
	}
	require.Equal(t, string(generated), strings.Join(body, ""), "the chart's CRD is stale: run `make crds`")
}

// The API package is types only: it imports the Kubernetes API machinery
// and nothing of the reclaimer's.
func TestTypesOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/gpureclaim/gpureclaim/api/v1alpha1").Output()
	require.NoError(t, err)
	for _, p := range strings.Fields(string(out)) {
		require.False(t, strings.HasPrefix(p, "github.com/gpureclaim/") && p != "github.com/gpureclaim/gpureclaim/api/v1alpha1", "the API imports %s", p)
	}
}
