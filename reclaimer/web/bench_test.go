package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
	"github.com/gpureclaim/gpureclaim/reclaimer/web"
)

// BenchmarkWebhookWhilePolled measures one webhook (a notification of one
// new alert, decided and persisted) while 60,000 reclaims are stored and
// four clients poll the status page and the list API without pause. It
// reports the webhook's latency percentiles.
func BenchmarkWebhookWhilePolled(b *testing.B) {
	const stored, pollers = 60000, 4
	h, eng := benchServer(b, "webhook: {bearer_token_file: token, max_body_bytes: 8MiB}\n")
	for i := 0; i < stored; i += 1000 {
		var batch []notification.Alert
		for j := i; j < i+1000; j++ {
			batch = append(batch, reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", fmt.Sprintf("nb-%d", j)))
		}
		if _, err := eng.Ingest(batch); err != nil {
			b.Fatal(err)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths := []string{"/", "/api/v1/reclaims"}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, paths[(i+p)%2], nil))
			}
		}()
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		body, _ := json.Marshal(notification.Notification{Version: "4", GroupKey: "{}:{}", Receiver: "gpureclaim", Status: "firing",
			Alerts: []notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", fmt.Sprintf("new-%d", i))}})
		req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer t0ken")
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		lat = append(lat, time.Since(start))
		if rec.Code != http.StatusOK {
			b.Fatalf("webhook: %d %s", rec.Code, rec.Body.String())
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(1), "max-ms")
}

// BenchmarkOneAlertNotifications posts one-alert notifications (each a
// new alert, decided and fsynced) from 8 senders at once, as Alertmanager
// does for many groups; run it with -benchtime 10000x.
func BenchmarkOneAlertNotifications(b *testing.B) {
	h, _ := benchServer(b, "webhook: {bearer_token_file: token}\ncircuit_breaker: {max_pending: 0}\n")
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i], _ = json.Marshal(notification.Notification{Version: "4", GroupKey: "{}:{}", Receiver: "gpureclaim", Status: "firing",
			Alerts: []notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", fmt.Sprintf("one-%d", i))}})
	}
	next := make(chan int)
	var wg sync.WaitGroup
	var failed sync.Once
	b.ResetTimer()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(bodies[i]))
				req.Header.Set("Authorization", "Bearer t0ken")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					failed.Do(func() { b.Errorf("webhook: %d %s", rec.Code, rec.Body.String()) })
				}
			}
		}()
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "notifications/s")
}

// benchServer is the reclaimer's HTTP side on an engine over a bbolt file.
func benchServer(b *testing.B, cfgYAML string) (*web.Server, *lifecycle.Engine) {
	cfg := reclaimtest.Config(b, cfgYAML)
	st, err := store.Open(filepath.Join(b.TempDir(), "s.db"), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	clock := reclaimtest.NewClock()
	reg := prometheus.NewRegistry()
	eng, err := lifecycle.New(lifecycle.Options{Config: cfg, Store: st, Journal: st, Actor: &reclaimtest.Actor{}, Clock: clock.Now, Metrics: lifecycle.NewMetrics(reg)})
	if err != nil {
		b.Fatal(err)
	}
	return web.New(web.Options{Config: cfg, Engine: eng, Clock: clock.Now, Registry: reg}), eng
}
