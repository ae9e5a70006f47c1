package kubestore_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kubestore"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
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
		eng := benchEngine(b, cfg, benchStore(b, cl, cfg))
		alerts := idlePods(10000, run)
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

// journalCounter counts the journal entries a store is asked for.
type journalCounter struct {
	*kubestore.Store
	entries atomic.Int64
}

func (j *journalCounter) Journal(notification []byte) (string, error) {
	j.entries.Add(1)
	return j.Store.Journal(notification)
}

// BenchmarkManySmallNotifications is 1,000 alerts into the engine on the
// kubernetes store at the default rate limit, as Alertmanager sends them
// when it groups by unit: 1,000 one-alert notifications from 16 senders at
// once; beside it the same alerts in one notification. reclaims/s is how
// many GPUReclaims are written per second until the last is, journaled the
// notifications also put in the journal (a ConfigMap written and deleted
// each) because their answer could not wait for the write.
func BenchmarkManySmallNotifications(b *testing.B) {
	cl, _ := apiserver(b)
	const alerts, senders = 1000, 16
	run := 0
	for _, notifications := range []int{alerts, 1} {
		b.Run(fmt.Sprintf("notifications=%d", notifications), func(b *testing.B) {
			cfg := reclaimtest.Config(b, "circuit_breaker: {max_pending: 0}\n")
			var took time.Duration
			var journaled int64
			for b.Loop() {
				b.StopTimer()
				run++
				st := &journalCounter{Store: benchStore(b, cl, cfg)}
				eng := benchEngine(b, cfg, st)
				all := idlePods(alerts, run)
				parts := slices.Collect(slices.Chunk(all, alerts/notifications))
				b.StartTimer()
				start := time.Now()
				next := make(chan []notification.Alert)
				var wg sync.WaitGroup
				var failed atomic.Value
				for range min(senders, len(parts)) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for part := range next {
							if _, err := eng.Ingest(part); err != nil {
								failed.Store(err)
							}
						}
					}()
				}
				for _, p := range parts {
					next <- p
				}
				close(next)
				wg.Wait()
				if err := eng.Flush(); err != nil {
					b.Fatal(err)
				}
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				journaled += st.entries.Load()
			}
			b.ReportMetric(float64(alerts*b.N)/took.Seconds(), "reclaims/s")
			b.ReportMetric(float64(journaled)/float64(b.N), "journaled")
		})
	}
}

// benchStore is the kubernetes store with the reclaimer's token and the
// config's rate limit.
func benchStore(b *testing.B, cl *kubetest.Cluster, cfg *config.Config) *kubestore.Store {
	rc := cl.RESTConfig(kubetest.ReclaimerToken)
	rc.QPS, rc.Burst = cfg.Kubernetes.QPS, cfg.Kubernetes.Burst
	st, err := kubestore.New(rc, deploy.Namespace, "gpureclaim-reclaimer-replays")
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// benchEngine is an engine on st that acts on nothing.
func benchEngine(b *testing.B, cfg *config.Config, st interface {
	reclaim.Store
	reclaim.Journal
}) *lifecycle.Engine {
	eng, err := lifecycle.New(lifecycle.Options{Config: cfg, Store: st, Journal: st, Actor: &reclaimtest.Actor{}, Clock: reclaimtest.NewClock().Now, Metrics: lifecycle.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// idlePods are n firing GPUIdle alerts, each for its own pod, of an
// episode of their own for each run.
func idlePods(n, run int) []notification.Alert {
	alerts := make([]notification.Alert, n)
	for i := range alerts {
		alerts[i] = reclaimtest.IdlePod("firing", reclaimtest.T0.Add(time.Duration(run)*time.Hour), fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("pod-%d", i))
	}
	return alerts
}
