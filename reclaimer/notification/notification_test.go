package notification_test

import (
	"runtime"
	"testing"

	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// Whatever Decode accepts is a valid version 4 notification.
func FuzzDecode(f *testing.F) {
	f.Add(reclaimtest.Notification(f, 2, reclaimtest.T0))
	f.Add([]byte(`{"version":"4","alerts":[{"status":"resolved","labels":{"alertname":"GPUIdle"},"startsAt":"2026-01-01T00:00:00Z","endsAt":"2026-01-01T01:00:00Z"}]}`))
	f.Add([]byte(`{"version":"4","alerts":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := notification.Decode(b)
		if err != nil {
			return
		}
		if m.Version != "4" || len(m.Alerts) == 0 {
			t.Fatalf("accepted %q", b)
		}
		for _, a := range m.Alerts {
			if (a.Status != "firing" && a.Status != "resolved") || a.StartsAt.IsZero() || a.Labels.Get("alertname") == "" {
				t.Fatalf("accepted an invalid alert in %q", b)
			}
		}
	})
}

// BenchmarkDecode100k reads one notification of 100,000 alerts
// (46 MB): time and memory per notification, and the heap its alerts hold
// once read (heap-MiB).
func BenchmarkDecode100k(b *testing.B) {
	body := reclaimtest.Notification(b, 100000, reclaimtest.T0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var held uint64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := notification.Decode(body)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		held = after.HeapAlloc - before.HeapAlloc
		runtime.KeepAlive(m)
		b.StartTimer()
	}
	b.ReportMetric(float64(held)/(1<<20), "heap-MiB")
}
