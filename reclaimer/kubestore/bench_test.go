package kubestore_test

import (
	"fmt"
	"testing"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/reclaimer/kubestore"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// BenchmarkWrite1000 persists the 1,000 reclaims of one notification as
// GPUReclaims on a real apiserver, at client-go's default rate limit and
// at the reclaimer's (kubernetes.qps, kubernetes.burst).
func BenchmarkWrite1000(b *testing.B) {
	cl, _ := apiserver(b)
	for _, limit := range []struct {
		qps   float32
		burst int
	}{{5, 10}, {50, 100}} {
		b.Run(fmt.Sprintf("qps=%g,burst=%d", limit.qps, limit.burst), func(b *testing.B) {
			run := 0
			for b.Loop() {
				run++
				rc := cl.RESTConfig(kubetest.ReclaimerToken)
				rc.QPS, rc.Burst = limit.qps, limit.burst
				st, err := kubestore.New(rc, deploy.Namespace, "gpureclaim-reclaimer-replays")
				if err != nil {
					b.Fatal(err)
				}
				rs := make([]*reclaim.Reclaim, 1000)
				for i := range rs {
					rs[i] = reclaimOf(fmt.Sprintf("%016x-%d", run*10000+i, 1772445600+int(limit.qps)), fmt.Sprintf("pod-%d", i), reclaim.Pending)
				}
				if err := st.Write(rs, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
