package lifecycle_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeclock"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
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
	alerts := make([]notification.Alert, n)
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
		eng, err := lifecycle.New(lifecycle.Options{Config: cfg, Store: st, Journal: st, Actor: &reclaimtest.Actor{}, Clock: reclaimtest.NewClock().Now, Metrics: lifecycle.NewMetrics(prometheus.NewRegistry())})
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
		if err != nil || res.New+res.Journaled != len(alerts) {
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
	eng, err := lifecycle.New(lifecycle.Options{Config: cfg, Store: st, Journal: st, Actor: &reclaimtest.Actor{}, Clock: reclaimtest.NewClock().Now, Metrics: lifecycle.NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	for batch := range 10 {
		alerts := make([]notification.Alert, 10000)
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
		res, err := eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ns-new", fmt.Sprintf("new-%d", i))})
		if err != nil || res.New != 1 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}

// benchEngine starts an engine on a new bbolt store, with a clock at T0
// and what with changes of its options.
func benchEngine(b *testing.B, cfg *config.Config, with func(*lifecycle.Options)) (*lifecycle.Engine, *store.Bolt, *fakeclock.Clock) {
	st, err := store.Open(filepath.Join(b.TempDir(), "s.db"), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	clock := reclaimtest.NewClock()
	o := lifecycle.Options{Config: cfg, Store: st, Journal: st, Actor: &reclaimtest.Actor{}, Clock: clock.Now, Metrics: lifecycle.NewMetrics(prometheus.NewRegistry())}
	if with != nil {
		with(&o)
	}
	eng, err := lifecycle.New(o)
	if err != nil {
		b.Fatal(err)
	}
	return eng, st, clock
}

// signalActor notes when its first action came.
type signalActor struct {
	reclaimtest.Actor
	acted chan time.Time
}

func (a *signalActor) Act(ctx context.Context, action config.Action, r *reclaim.Reclaim) (reclaim.Result, error) {
	select {
	case a.acted <- time.Now():
	default:
	}
	return a.Actor.Act(ctx, action, r)
}

// pacedNotifier takes 100 µs a message, as a real one takes longer.
type pacedNotifier struct{ *reclaimtest.Notifier }

func (n pacedNotifier) Send(ctx context.Context, m reclaim.Message, refs map[string]string) (map[string]string, []string, error) {
	time.Sleep(100 * time.Microsecond)
	return n.Notifier.Send(ctx, m, refs)
}

// BenchmarkDueActionBehindABurst is the delay of an action due when a
// notification of 10,000 new alerts has just come, all to be warned:
// act-ms from the step's start to the action, step-s the whole step. In
// the order of ids it would wait for the 10,000 warnings (about a second
// at 100 µs each).
func BenchmarkDueActionBehindABurst(b *testing.B) {
	cfg := reclaimtest.Config(b, "circuit_breaker: {max_pending: 0}\npolicies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: evict, grace: 5m, min_runtime: 0s}]\n")
	var burst []notification.Alert
	for i := range 10000 {
		burst = append(burst, reclaimtest.IdlePod("firing", reclaimtest.T0.Add(10*time.Minute), fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("aa-%05d", i)))
	}
	var act, step time.Duration
	for b.Loop() {
		b.StopTimer()
		actor := &signalActor{acted: make(chan time.Time, 1)}
		eng, st, clock := benchEngine(b, cfg, func(o *lifecycle.Options) {
			o.Actor, o.Notifiers = actor, []reclaim.Notifier{pacedNotifier{reclaimtest.NewNotifier("paced")}}
		})
		ctx := context.Background()
		// "zz" sorts after every pod of the burst.
		if _, err := eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "zz-due")}); err != nil {
			b.Fatal(err)
		}
		eng.Step(ctx) // warned
		clock.Advance(10 * time.Minute)
		if _, err := eng.Ingest(burst); err != nil {
			b.Fatal(err)
		}
		if err := eng.Flush(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		eng.Step(ctx)
		b.StopTimer()
		step += time.Since(start)
		select {
		case at := <-actor.acted:
			act += at.Sub(start)
		default:
			b.Fatal("the due action was not taken")
		}
		st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(act.Microseconds())/1000/float64(b.N), "act-ms")
	b.ReportMetric(step.Seconds()/float64(b.N), "step-s")
}

// BenchmarkPrune10k prunes 10,000 ended reclaims from a bbolt store of
// 20,000 while one-alert notifications keep coming: ns/op the prune,
// ingest-max-ms the slowest notification meanwhile (prune does not hold
// the engine while the store deletes).
func BenchmarkPrune10k(b *testing.B) {
	cfg := reclaimtest.Config(b, "circuit_breaker: {max_pending: 0}\npolicies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: notify}, {name: evict, matchers: ['alertname=\"GPUWasted\"'], action: evict}]\n")
	var slowest time.Duration
	for b.Loop() {
		b.StopTimer()
		eng, st, clock := benchEngine(b, cfg, nil)
		var ended, open []notification.Alert
		for i := range 10000 {
			ended = append(ended, reclaimtest.IdlePod("firing", reclaimtest.T0, fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("ended-%d", i)))
			a := reclaimtest.IdlePod("firing", reclaimtest.T0, fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("open-%d", i))
			a.Labels = labels.NewBuilder(a.Labels).Set("alertname", "GPUWasted").Labels()
			a.Fingerprint = reclaim.Fingerprint(a.Labels)
			open = append(open, a)
		}
		for _, alerts := range [][]notification.Alert{ended, open} {
			if _, err := eng.Ingest(alerts); err != nil {
				b.Fatal(err)
			}
		}
		clock.Advance(time.Hour)
		done := make(chan struct{})
		b.StartTimer()
		go func() {
			defer close(done)
			if n, err := eng.Prune(clock.Now()); err != nil || n != 10000 {
				b.Errorf("pruned %d: %v", n, err)
			}
		}()
		for i := 0; ; i++ {
			select {
			case <-done:
			default:
				start := time.Now()
				if _, err := eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", clock.Now(), "new", fmt.Sprintf("new-%d", i))}); err != nil {
					b.Fatal(err)
				}
				slowest = max(slowest, time.Since(start))
				continue
			}
			break
		}
		b.StopTimer()
		if got := len(eng.List()); got != 10000+1 && got < 10000 {
			b.Fatalf("%d left", got)
		}
		st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(slowest.Microseconds())/1000, "ingest-max-ms")
}
