package backtest

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

func isDCGM(l labels.Labels) bool { return strings.HasPrefix(l.Get("__name__"), "DCGM_FI_") }

// dcgmSeries is one of dcgm-exporter's series with what the rules for
// source: dcgm make of it: the unit, and the pod its mapping names.
type dcgmSeries struct {
	Series
	uuid, namespace, pod string
}

// fromDCGM reads an export of dcgm-exporter's fields (ExportQueryDCGM) into
// a history replayed through the rules for source: dcgm. A workload is a
// pod the mapping names on a unit: it holds the unit while its memory
// field has samples, and its series are the unit's fields that name it
// (dcgm-exporter repeats them for each pod of a shared GPU), so taking it
// off the unit takes them away.
func fromDCGM(h History, all []Series, n int, topOwner reclaim.TopOwner, honorLabels bool) (History, error) {
	// Scraped without honor_labels (as the rules assume by default), the
	// mapping's labels are exported_* and pod is dcgm-exporter's own.
	prefix := names.DCGMExported
	if honorLabels {
		prefix = ""
	}
	byOwner := map[string][]dcgmSeries{}
	var keys []string
	for _, s := range all {
		l := s.Labels
		d := dcgmSeries{Series: s, uuid: l.Get(names.DCGMLabelUUID), namespace: l.Get(prefix + names.LabelNamespace), pod: l.Get(prefix + names.LabelPod)}
		if id := l.Get(names.DCGMLabelMIGID); id != "" {
			d.uuid = names.DCGMMIGUUID(d.uuid, id)
		}
		if d.uuid == "" || d.pod == "" || !isDCGM(l) {
			continue // no unit, or no pod holds it: nothing to reclaim
		}
		k := ownerKey(d.uuid, d.namespace, d.pod, "", "")
		if byOwner[k] == nil {
			keys = append(keys, k)
		}
		byOwner[k] = append(byOwner[k], d)
	}
	if len(keys) == 0 {
		return History{}, fmt.Errorf("no dcgm-exporter series names a pod in %s…: is its Kubernetes pod mapping on, and does the scrape honor its labels (then say so)? Export %s", prefix+names.LabelPod, ExportQueryDCGM)
	}
	sort.Strings(keys)
	ids := map[string]int{}
	for _, k := range keys {
		ss := byOwner[k]
		d := ss[0]
		w := Workload{TopOwner: topOwner, key: k, Owner: d.namespace, ID: d.namespace + "/" + d.pod}
		if ids[w.ID]++; ids[w.ID] > 1 {
			w.ID += "@" + d.uuid
		}
		field := func(name string) []float64 {
			for _, s := range ss {
				if s.Labels.Get("__name__") == name {
					return s.Values
				}
			}
			return nans(n)
		}
		w.Activity, w.Memory = field(names.DCGMSMActive), scale(field(names.DCGMFBUsed), 1<<20)
		if allNaN(w.Activity) {
			w.Activity, h.Signal = scale(field(names.DCGMGPUUtil), 0.01), "utilization"
		}
		w.held = make([]bool, n)
		for i, v := range field(names.DCGMFBUsed) {
			w.held[i] = !math.IsNaN(v)
		}
		for _, s := range ss {
			w.Series = append(w.Series, s.Series)
		}
		h.Workloads = append(h.Workloads, w)
	}
	sort.Slice(h.Workloads, func(i, j int) bool { return h.Workloads[i].ID < h.Workloads[j].ID })
	return h, nil
}

func scale(vs []float64, f float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = v * f
	}
	return out
}
