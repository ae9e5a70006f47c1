package kubestore_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kubestore"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// BenchmarkWrite persists the reclaims of one notification as GPUReclaims
// on a real apiserver: 1,000 at client-go's default rate limit and at the
// reclaimer's (kubernetes.qps, kubernetes.burst), 10,000 at the reclaimer's.
func BenchmarkWrite(b *testing.B) {
	cl, _ := apiserver(b)
	for i, c := range []struct {
		n     int
		qps   float32
		burst int
	}{{1000, 5, 10}, {1000, config.DefaultQPS, 2 * config.DefaultQPS}, {10000, config.DefaultQPS, 2 * config.DefaultQPS}} {
		run := 0 // across -count's runs, which share the apiserver
		b.Run(fmt.Sprintf("reclaims=%d,qps=%g,burst=%d", c.n, c.qps, c.burst), func(b *testing.B) {
			for b.Loop() {
				run++
				rc := cl.RESTConfig(kubetest.ReclaimerToken)
				rc.QPS, rc.Burst = c.qps, c.burst
				st, err := kubestore.New(rc, deploy.Namespace, "gpureclaim-reclaimer-replays")
				if err != nil {
					b.Fatal(err)
				}
				rs := make([]*reclaim.Reclaim, c.n)
				for j := range rs {
					rs[j] = reclaimOf(fmt.Sprintf("%016x-%d", (i*100+run)*100000+j, 1772445600), fmt.Sprintf("pod-%d", j), reclaim.Pending)
				}
				if err := st.Write(rs, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIngest10kAlerts is one Alertmanager notification of 10,000
// firing alerts into the engine on the kubernetes store, at the default
// rate limit: answered-s until it is answered, ns/op until every reclaim
// is a GPUReclaim, reclaimer-cpu-s the CPU this process spent,
// apiserver-cpu-s what kube-apiserver and etcd spent and
// apiserver-wait-s how long they waited for a CPU meanwhile.
func BenchmarkIngest10kAlerts(b *testing.B) {
	cl, _ := apiserver(b)
	cfg := reclaimtest.Config(b, "circuit_breaker: {max_pending: 0}\n")
	var answered, cpu, apiCPU, apiWait time.Duration
	run := 0
	for b.Loop() {
		b.StopTimer()
		run++
		rc := cl.RESTConfig(kubetest.ReclaimerToken)
		rc.QPS, rc.Burst = cfg.Kubernetes.QPS, cfg.Kubernetes.Burst
		st, err := kubestore.New(rc, deploy.Namespace, "gpureclaim-reclaimer-replays")
		if err != nil {
			b.Fatal(err)
		}
		eng, err := reclaim.New(reclaim.Options{Config: cfg, Store: st, Actor: &reclaimtest.Actor{}, Clock: reclaimtest.NewClock().Now, Metrics: reclaim.NewMetrics(prometheus.NewRegistry())})
		if err != nil {
			b.Fatal(err)
		}
		alerts := make([]reclaim.Alert, 10000)
		for i := range alerts {
			alerts[i] = reclaimtest.IdlePod("firing", reclaimtest.T0.Add(time.Duration(run)*time.Hour), fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("pod-%d", i))
		}
		var ru0, ru1 syscall.Rusage
		_ = syscall.Getrusage(0, &ru0)
		ran0, waited0, err := cl.CPU()
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		res, err := eng.Ingest(alerts)
		answered += time.Since(start)
		if err == nil {
			err = eng.Flush()
		}
		if err != nil || res.New != len(alerts) {
			b.Fatalf("%+v %v", res, err)
		}
		_ = syscall.Getrusage(0, &ru1)
		cpu += time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		ran1, waited1, err := cl.CPU()
		if err != nil {
			b.Fatal(err)
		}
		apiCPU, apiWait = apiCPU+ran1-ran0, apiWait+waited1-waited0
	}
	b.ReportMetric(answered.Seconds()/float64(b.N), "answered-s")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "reclaimer-cpu-s")
	b.ReportMetric(apiCPU.Seconds()/float64(b.N), "apiserver-cpu-s")
	b.ReportMetric(apiWait.Seconds()/float64(b.N), "apiserver-wait-s")
}
