package collector

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpureclaim/gpureclaim/exporter/sampler"
)

// SnapshotGatherer gathers collectors that depend only on the snapshot once
// per snapshot: between two samples every scrape gets the same families, so
// a scrape costs the encoding and little else, however many Prometheus
// replicas scrape.
type SnapshotGatherer struct {
	src Source
	reg *prometheus.Registry

	mu   sync.Mutex
	snap *sampler.Snapshot
	mfs  []*dto.MetricFamily
}

// NewSnapshotGatherer registers cs, which must read nothing but src.Latest().
func NewSnapshotGatherer(src Source, cs ...prometheus.Collector) (*SnapshotGatherer, error) {
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return &SnapshotGatherer{src: src, reg: reg}, nil
}

// Gather returns the families of the latest snapshot. Callers must not
// change them (promhttp and prometheus.Gatherers do not).
func (g *SnapshotGatherer) Gather() ([]*dto.MetricFamily, error) {
	snap := g.src.Latest()
	g.mu.Lock()
	defer g.mu.Unlock()
	if snap != nil && snap == g.snap {
		return g.mfs, nil
	}
	mfs, err := g.reg.Gather()
	if err != nil {
		return mfs, err
	}
	g.snap, g.mfs = snap, mfs
	return mfs, nil
}
