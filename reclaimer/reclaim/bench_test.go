package reclaim_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
)

// BenchmarkIngest10kAlerts decides and durably records one webhook carrying
// 10,000 firing alerts (one fsynced bbolt transaction), into an empty store:
// ns/op until written, answered-s until Ingest returned.
func BenchmarkIngest10kAlerts(b *testing.B) { benchmarkIngest(b, 10000) }

// BenchmarkIngest100kAlerts is the same with 100,000 alerts.
func BenchmarkIngest100kAlerts(b *testing.B) { benchmarkIngest(b, 100000) }

func benchmarkIngest(b *testing.B, n int) {
	alerts := make([]template.Alert, n)
	for i := range alerts {
		alerts[i] = reclaimtest.IdlePod("firing", reclaimtest.T0, fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("pod-%d", i))
	}
	cfg := reclaimtest.Config(b, "circuit_breaker: {max_pending: 0}\n")
	b.ReportAllocs()
	var heap uint64
	var answered time.Duration
	for b.Loop() {
		b.StopTimer()
		st, err := store.Open(filepath.Join(b.TempDir(), "s.db"), time.Second)
		if err != nil {
			b.Fatal(err)
		}
		eng, err := reclaim.New(reclaim.Options{Config: cfg, Store: st, Actor: &reclaimtest.Actor{}, Clock: reclaimtest.NewClock().Now, Metrics: reclaim.NewMetrics(prometheus.NewRegistry())})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		start := time.Now()
		res, err := eng.Ingest(alerts)
		answered += time.Since(start)
		if err == nil {
			err = eng.Flush()
		}
		b.StopTimer()
		if err != nil || res.New != len(alerts) {
			b.Fatalf("%+v %v", res, err)
		}
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap = after.HeapAlloc - before.HeapAlloc
		st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(answered.Seconds()/float64(b.N), "answered-s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(alerts)), "µs/alert")
}

// BenchmarkIngestOneAlertBeside100k records a one-alert notification
// into a store that already holds 100,000 reclaims: what one alert costs
// must not grow with what the store holds.
func BenchmarkIngestOneAlertBeside100k(b *testing.B) {
	cfg := reclaimtest.Config(b, "circuit_breaker: {max_pending: 0}\n")
	st, err := store.Open(filepath.Join(b.TempDir(), "s.db"), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	eng, err := reclaim.New(reclaim.Options{Config: cfg, Store: st, Actor: &reclaimtest.Actor{}, Clock: reclaimtest.NewClock().Now, Metrics: reclaim.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	for batch := range 10 {
		alerts := make([]template.Alert, 10000)
		for i := range alerts {
			alerts[i] = reclaimtest.IdlePod("firing", reclaimtest.T0, fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("stored-%d-%d", batch, i))
		}
		if _, err := eng.Ingest(alerts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		res, err := eng.Ingest([]template.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ns-new", fmt.Sprintf("new-%d", i))})
		if err != nil || res.New != 1 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
