package collector_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpureclaim/gpureclaim/exporter/collector"
	"github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest"
)

func scrape(b *testing.B, h http.Handler) {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		w.Body = nil // count the encoding, not the buffer's growth
		h.ServeHTTP(discard{w}, req)
	}
}

type discard struct{ *httptest.ResponseRecorder }

func (d discard) Write(p []byte) (int, error) { return io.Discard.Write(p) }

// BenchmarkScrapeDemo serves one scrape of the demo node (8 GPUs, 11 units,
// 10 owners) from the sampler's snapshot.
func BenchmarkScrapeDemo(b *testing.B) {
	reg, _ := demoRegistry(b)
	scrape(b, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}

// BenchmarkScrapeDemoCached is the exporter's scrape: the snapshot's
// families gathered once per sample, health gathered live.
func BenchmarkScrapeDemoCached(b *testing.B) {
	n := samplertest.Start(b, samplertest.Builtin(b, "demo"), nil)
	n.SampleAt(b, demoAt, 10*time.Second)
	cached, err := collector.NewSnapshotGatherer(n.Sampler, collector.FromSnapshot(n.Sampler)...)
	if err != nil {
		b.Fatal(err)
	}
	live := prometheus.NewRegistry()
	live.MustRegister(collector.NewHealth(n.Sampler, n.Clock.Now))
	scrape(b, promhttp.HandlerFor(prometheus.Gatherers{cached, live}, promhttp.HandlerOpts{}))
}

// BenchmarkScrapeDemoGaugeVecs encodes the same series from GaugeVecs set
// ahead of time: what client_golang alone costs, with no collector work.
func BenchmarkScrapeDemoGaugeVecs(b *testing.B) {
	reg, _ := demoRegistry(b)
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	baseline := prometheus.NewRegistry()
	for _, mf := range mfs {
		var names []string
		for _, lp := range mf.Metric[0].Label {
			names = append(names, lp.GetName())
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: mf.GetName(), Help: mf.GetHelp()}, names)
			baseline.MustRegister(v)
			for _, m := range mf.Metric {
				v.With(labels(m)).Add(m.Counter.GetValue())
			}
		default:
			v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: mf.GetName(), Help: mf.GetHelp()}, names)
			baseline.MustRegister(v)
			for _, m := range mf.Metric {
				v.With(labels(m)).Set(m.Gauge.GetValue())
			}
		}
	}
	scrape(b, promhttp.HandlerFor(baseline, promhttp.HandlerOpts{}))
}

func labels(m *dto.Metric) prometheus.Labels {
	l := prometheus.Labels{}
	for _, lp := range m.Label {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}
