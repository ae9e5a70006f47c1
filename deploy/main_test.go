package deploy_test

import (
	"os"
	"sync"
	"testing"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "gpureclaim-deploy-test"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

var (
	buildOnce          sync.Once
	exporter, reclaimr string
)

// binaries builds the exporter and the reclaimer once for the package's tests.
func binaries(t *testing.T) (exporterBin, reclaimerBin string) {
	t.Helper()
	buildOnce.Do(func() {
		exporter = tooltest.Build(t, binDir, "./exporter", "gpureclaim-exporter")
		reclaimr = tooltest.Build(t, binDir, "./reclaimer", "gpureclaim-reclaimer")
	})
	if exporter == "" || reclaimr == "" {
		t.Fatal("building the binaries failed in an earlier test")
	}
	return exporter, reclaimr
}
