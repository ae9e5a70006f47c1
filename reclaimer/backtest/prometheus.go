package backtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// ExportQuery is what to export from Prometheus for a backtest: the
// exporter's unit series, with the owners.
const ExportQuery = `{__name__=~"gpureclaim_unit_(info|owner_info|sm_active_ratio|utilization_ratio|memory_used_bytes|memory_total_bytes)"}`

// ExportQueryDCGM is the same for a cluster that runs dcgm-exporter: the
// fields the rules for source: dcgm read.
var ExportQueryDCGM = `{__name__=~"` + strings.Join(names.DCGMFields, "|") + `"}`

type queryRange struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

// FromPrometheus reads a Prometheus range-query export (the JSON of
// /api/v1/query_range for ExportQuery) into a history: one workload per
// owner of a unit (gpureclaim_unit_owner_info), which holds the unit while
// that series has samples, with its unit's series. topOwner is what runs the
// pods (the export does not say).
//
// An export of dcgm-exporter's fields (ExportQueryDCGM) is read as the rules
// for source: dcgm read it; dcgmHonorLabels says the scrape kept the pod
// mapping's labels as they are (rules config dcgm.honor_labels).
func FromPrometheus(r io.Reader, topOwner reclaim.TopOwner, dcgmHonorLabels bool) (History, error) {
	var q queryRange
	if err := json.NewDecoder(r).Decode(&q); err != nil {
		return History{}, fmt.Errorf("not a query_range answer: %w", err)
	}
	if q.Status != "success" {
		return History{}, fmt.Errorf("the query failed: %s", q.Error)
	}
	if q.Data.ResultType != "matrix" {
		return History{}, fmt.Errorf("result type %q, want matrix (a range query)", q.Data.ResultType)
	}
	type raw struct {
		labels labels.Labels
		ts     []int64
		vs     []float64
	}
	var all []raw
	var stamps []int64
	if len(q.Data.Result) == 0 {
		return History{}, errors.New("no series: export " + ExportQuery + " (or, from dcgm-exporter, " + ExportQueryDCGM + ")")
	}
	for _, s := range q.Data.Result {
		rw := raw{labels: labels.FromMap(s.Metric)}
		for _, p := range s.Values {
			t, ok1 := p[0].(float64)
			vs, ok2 := p[1].(string)
			if !ok1 || !ok2 {
				return History{}, fmt.Errorf("%s: a sample is not [time, \"value\"]", rw.labels)
			}
			v, err := strconv.ParseFloat(vs, 64)
			if err != nil {
				return History{}, fmt.Errorf("%s: %w", rw.labels, err)
			}
			ms := int64(math.Round(t * 1000))
			rw.ts, rw.vs = append(rw.ts, ms), append(rw.vs, v)
			stamps = append(stamps, ms)
		}
		all = append(all, rw)
	}
	if len(stamps) == 0 {
		return History{}, errors.New("no samples")
	}
	sort.Slice(stamps, func(i, j int) bool { return stamps[i] < stamps[j] })
	var step int64
	for i := 1; i < len(stamps); i++ {
		if d := stamps[i] - stamps[i-1]; d > 0 && (step == 0 || d < step) {
			step = d
		}
	}
	if step == 0 {
		step = 60_000
	}
	start := stamps[0]
	n := int((stamps[len(stamps)-1]-start)/step) + 1
	grid := func(rw raw) []float64 {
		out := nans(n)
		for k, t := range rw.ts {
			out[(t-start)/step] = rw.vs[k]
		}
		return out
	}
	h := History{Start: time.UnixMilli(start).UTC(), Step: time.Duration(step) * time.Millisecond, Signal: "sm_active"}
	if isDCGM(all[0].labels) {
		series := make([]Series, len(all))
		for i, rw := range all {
			series[i] = Series{rw.labels, grid(rw)}
		}
		return fromDCGM(h, series, n, topOwner, dcgmHonorLabels)
	}
	units := map[string][]Series{}
	var owners []raw
	for _, rw := range all {
		uuid := rw.labels.Get(names.LabelUUID)
		switch {
		case uuid == "":
		case rw.labels.Get("__name__") == "gpureclaim_unit_owner_info":
			owners = append(owners, rw)
		default:
			units[uuid] = append(units[uuid], Series{rw.labels, grid(rw)})
		}
	}
	if len(owners) == 0 {
		return History{}, errors.New("no gpureclaim_unit_owner_info series: export " + ExportQuery)
	}
	ids := map[string]int{}
	for _, ow := range owners {
		l := ow.labels
		uuid, ns, pod, user, job := l.Get(names.LabelUUID), l.Get(names.LabelNamespace), l.Get(names.LabelPod), l.Get(names.LabelUser), l.Get(names.LabelSlurmJob)
		w := Workload{TopOwner: topOwner, key: ownerKey(uuid, ns, pod, user, job), Owner: ns, ID: ns + "/" + pod}
		if pod == "" {
			w.Owner, w.ID = user, user
			if job != "" {
				w.ID += "/" + job
			}
		}
		if ids[w.ID]++; ids[w.ID] > 1 {
			w.ID += "@" + uuid
		}
		held := grid(ow)
		w.Series = append([]Series{{ow.labels, held}}, units[uuid]...)
		w.Activity, w.Memory = unitSignal(units[uuid], "gpureclaim_unit_sm_active_ratio", n), unitSignal(units[uuid], "gpureclaim_unit_memory_used_bytes", n)
		if allNaN(w.Activity) {
			w.Activity, h.Signal = unitSignal(units[uuid], "gpureclaim_unit_utilization_ratio", n), "utilization"
		}
		w.held = make([]bool, n)
		for i, v := range held {
			w.held[i] = !math.IsNaN(v)
		}
		h.Workloads = append(h.Workloads, w)
	}
	sort.Slice(h.Workloads, func(i, j int) bool { return h.Workloads[i].ID < h.Workloads[j].ID })
	return h, nil
}

func unitSignal(ss []Series, name string, n int) []float64 {
	for _, s := range ss {
		if s.Labels.Get("__name__") == name {
			return s.Values
		}
	}
	return nans(n)
}

func allNaN(vs []float64) bool {
	for _, v := range vs {
		if !math.IsNaN(v) {
			return false
		}
	}
	return true
}

// nans is n steps with no sample.
func nans(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
	}
	return out
}
