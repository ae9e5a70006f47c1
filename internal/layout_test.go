package internal_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/gpureclaim/gpureclaim/"

// TestLayout holds the arrows of internal/'s layout: nothing in it imports a
// component (api/, the public types, is none), and only tests and test helper packages (named *test, as
// net/http/httptest) import a test kit.
func TestLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, imports := strings.TrimPrefix(f[0], module), f[1:]
		for _, imp := range imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			if strings.HasPrefix(pkg, "internal/") {
				require.True(t, strings.HasPrefix(imp, "internal/") || strings.HasPrefix(imp, "api/"), "%s imports %s: internal/ must not import a component", pkg, imp)
			}
			if strings.HasPrefix(imp, "internal/testkit/") {
				helper := strings.HasSuffix(pkg[strings.LastIndex(pkg, "/")+1:], "test")
				require.True(t, helper || strings.HasPrefix(pkg, "internal/testkit/"), "%s, which is not a test, imports the test kit %s", pkg, imp)
			}
		}
	}
}
