package v1alpha1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// generate runs controller-gen on these types.
func generate(t *testing.T, what string) string {
	cmd := exec.Command(tooltest.Bin(t, "controller-gen"), what, "paths=./api/...", "output:stdout")
	cmd.Dir = tooltest.Root(t)
	out, err := cmd.Output()
	require.NoError(t, err)
	return string(out)
}

// The deepcopy functions are what controller-gen writes from these types.
// `make crds` writes them.
func TestDeepCopyIsGeneratedFromTheTypes(t *testing.T) {
	b, err := os.ReadFile("zz_generated.deepcopy.go")
	require.NoError(t, err)
	require.Equal(t, generate(t, "object"), string(b), "the deepcopy functions are stale: run `make crds`")
}

// The chart's CRD is what controller-gen writes from these types: a field
// added to the types and not to the CRD would be pruned by the apiserver.
// `make crds` writes it.
func TestCRDIsGeneratedFromTheTypes(t *testing.T) {
	root := tooltest.Root(t)
	generated := generate(t, "crd:crdVersions=v1")
	b, err := os.ReadFile(filepath.Join(root, "deploy/helm/gpureclaim/crds/gpureclaims.gpureclaim.io.yaml"))
	require.NoError(t, err)
	var body []string
	for i, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			body = strings.SplitAfter(string(b), "\n")[i:]
			break
		}
	}
	require.Equal(t, generated, strings.Join(body, ""), "the chart's CRD is stale: run `make crds`")
}

// A typed client reads the types: they register in a scheme, and a
// GPUReclaim is a runtime.Object that deep-copies.
func TestScheme(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, v1alpha1.AddToScheme(s))
	gvks, _, err := s.ObjectKinds(&v1alpha1.GPUReclaim{})
	require.NoError(t, err)
	require.Equal(t, v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.Kind), gvks[0])
	g := &v1alpha1.GPUReclaim{Spec: v1alpha1.GPUReclaimSpec{Episode: v1alpha1.Episode{Labels: map[string]string{"a": "b"}}}}
	c := g.DeepCopyObject().(*v1alpha1.GPUReclaim)
	c.Spec.Episode.Labels["a"] = "changed"
	require.Equal(t, "b", g.Spec.Episode.Labels["a"], "a deep copy")
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
