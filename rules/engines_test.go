package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/promql"
	prules "github.com/prometheus/prometheus/rules"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/ruleeval"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// The rules on VictoriaMetrics: the small fleet in two clusters that hold
// the same units and pods, stored in VictoriaMetrics single-node and
// evaluated by vmalert (replaying the 80 minutes), give the records and
// alerts Prometheus gives on the same series.
func TestVictoriaMetricsComputesTheSame(t *testing.T) {
	vmalert := tooltest.Bin(t, "vmalert")
	vm := tooltest.Serve(t, "victoria-metrics", "/health", func(addr, dir string) []string {
		return []string{"-httpListenAddr=" + addr, "-storageDataPath=" + dir, "-retentionPeriod=100y",
			"-search.disableCache", "-search.latencyOffset=0s", "-loggerLevel=WARN"}
	})
	file := fleetRuleFile(t, 1)
	records := recordNames(t, file)
	want := evalFleet(t, file, records, nil, "a", "b")

	var body bytes.Buffer
	for m := range fleetMinutes {
		ts := fleetStart.Add(time.Duration(m) * time.Minute).UnixMilli()
		fleetSeries(nil, []string{"a", "b"}, func(ls labels.Labels, v float64) {
			body.WriteString(exposition(ls))
			fmt.Fprintf(&body, " %s %d\n", strconv.FormatFloat(v, 'g', -1, 64), ts)
		})
	}
	resp, err := http.Post(vm.URL+"/api/v1/import/prometheus", "text/plain", &body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	flush(t, vm.URL)

	// vmalert replays one rule at a time over the 80 minutes, and what it
	// wrote is flushed before the next reads it: a rule reads the records
	// before it at each minute, as in Prometheus's groups, with no wait
	// that a busy machine could outrun (replay's own -replay.rulesDelay).
	end := fleetStart.Add((fleetMinutes - 1) * time.Minute)
	dir := t.TempDir()
	for _, g := range oneRuleGroups(t, file) {
		path := writeRuleFile(t, filepath.Join(dir, g.Name+".yml"), g)
		cmd := exec.Command(vmalert, "-rule="+path, "-datasource.url="+vm.URL, "-remoteWrite.url="+vm.URL,
			"-replay.timeFrom="+fleetStart.Format(time.RFC3339), "-replay.timeTo="+end.Add(time.Second).Format(time.RFC3339),
			"-replay.disableProgressBar", "-replay.rulesDelay=0", "-evaluationInterval=1m",
			"-httpListenAddr="+tooltest.FreeAddr(t), "-loggerLevel=WARN")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", g.Name, out)
		flush(t, vm.URL)
	}

	got := map[string][]string{}
	for _, name := range append(records, "ALERTS") {
		got[name] = instant(t, vm.URL, name, end)
	}
	for _, name := range append(records, "ALERTS") {
		require.NotEmpty(t, want[name], "%s: the fleet exercises it", name)
		// The engines add in another order: the last bits differ.
		require.Equal(t, rounded(t, want[name]), rounded(t, got[name]), "%s", name)
	}
}

// rounded writes each series' value to 9 significant digits.
func rounded(t *testing.T, series []string) []string {
	out := make([]string, len(series))
	for i, s := range series {
		at := strings.LastIndexByte(s, ' ')
		v, err := strconv.ParseFloat(s[at+1:], 64)
		require.NoError(t, err, s)
		out[i] = fmt.Sprintf("%s %.9g", s[:at], v)
	}
	return out
}

// oneRuleGroups are a rule file's rules in order, each in a group of its
// own (named after its group and place), for an engine that must write
// each rule's results before the next rule reads them.
func oneRuleGroups(t *testing.T, file string) []Group {
	var f File
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &f))
	var out []Group
	for _, g := range f.Groups {
		for i, r := range g.Rules {
			out = append(out, Group{Name: fmt.Sprintf("%s.%d", g.Name, i), Interval: g.Interval, Rules: []Rule{r}})
		}
	}
	return out
}

// exposition writes a series as the Prometheus text format names it,
// leaving out empty labels (which no engine keeps).
func exposition(ls labels.Labels) string {
	var b strings.Builder
	b.WriteString(ls.Get(model.MetricNameLabel))
	b.WriteByte('{')
	first := true
	ls.Range(func(l labels.Label) {
		if l.Name == model.MetricNameLabel || l.Value == "" {
			return
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, "%s=%q", l.Name, l.Value)
	})
	b.WriteByte('}')
	return b.String()
}

// flush makes what VictoriaMetrics took searchable.
func flush(t *testing.T, base string) {
	resp, err := http.Get(base + "/internal/force_flush")
	require.NoError(t, err)
	resp.Body.Close()
}

// instant is an engine's answer to an instant query at a time, each series
// as evalFleet writes it; vmalert's alertgroup label, which Prometheus's
// ALERTS does not have, is left out.
func instant(t *testing.T, base, query string, at time.Time) []string {
	u := base + "/api/v1/query?" + url.Values{"query": {query}, "time": {strconv.FormatInt(at.Unix(), 10)}}.Encode()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	require.Equal(t, "success", r.Status, query)
	var out []string
	for _, s := range r.Data.Result {
		delete(s.Metric, "alertgroup")
		v, err := strconv.ParseFloat(s.Value[1].(string), 64)
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%s %.12g", labels.FromMap(s.Metric), v))
	}
	sort.Strings(out)
	return out
}

// The rules on Thanos: each cluster's series go to a Thanos Receive of its
// own, which announces its cluster as an external label (as a sidecar
// does for a Prometheus with external_labels), and Thanos Query answers
// every query of the rules over both and over a third Receive that holds
// what the rules wrote. The rules are evaluated the way Thanos Ruler does
// (Prometheus's rule manager, each query asked of Thanos Query, each
// result written where the querier reads it) on a simulated clock, one
// rule a group, so that each result is written before the next rule reads
// it. The records and alerts are Prometheus's on the same series.
func TestThanosComputesTheSame(t *testing.T) {
	type receiver struct{ grpc, write string }
	receive := func(label string) receiver {
		var r receiver
		srv := tooltest.Serve(t, "thanos", "/-/ready", func(addr, dir string) []string {
			r = receiver{tooltest.FreeAddr(t), tooltest.FreeAddr(t)}
			capnp := tooltest.FreeAddr(t)
			args := []string{"receive", "--http-address=" + addr, "--grpc-address=" + r.grpc, "--remote-write.address=" + r.write,
				"--receive.capnproto-address=" + capnp, "--tsdb.path=" + dir, "--tsdb.retention=100y", "--log.level=warn"}
			if label != "" {
				args = append(args, "--label="+label)
			}
			return append(args, `--label=receive="`+filepath.Base(dir)+`"`)
		})
		require.Eventually(t, func() bool {
			c, err := net.Dial("tcp", r.write)
			if err == nil {
				c.Close()
			}
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "the receiver takes remote writes")
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(srv.Dir, "thanos.log"))
				t.Logf("receive %s:\n%s", label, b)
			}
		})
		return r
	}
	a, b, records := receive(`cluster="a"`), receive(`cluster="b"`), receive("")
	// Each receiver holds a sample at the start before Thanos Query first
	// asks it what time it covers: Query keeps that answer for a while,
	// and a simulated clock runs through history faster than it asks again.
	for _, r := range []receiver{a, b, records} {
		remoteWrite(t, r.write, []ruleeval.Sample{{Labels: labels.FromStrings(model.MetricNameLabel, "gpureclaim_test_start"), T: fleetStart.UnixMilli(), F: 1}})
	}
	query := tooltest.Serve(t, "thanos", "/-/ready", func(addr, _ string) []string {
		return []string{"query", "--http-address=" + addr, "--grpc-address=" + tooltest.FreeAddr(t),
			"--endpoint=" + a.grpc, "--endpoint=" + b.grpc, "--endpoint=" + records.grpc,
			// Receive's own labels are not the clusters': left out of results.
			"--query.replica-label=receive", "--query.replica-label=tenant_id", "--query.lookback-delta=5m", "--log.level=warn"}
	})

	// Every receiver is known to the querier before the first query: one
	// it has not found yet would be left out of an answer.
	require.Eventually(t, func() bool {
		resp, err := http.Get(query.URL + "/api/v1/stores")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var r struct {
			Data map[string][]struct{ LastError *string }
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil {
			return false
		}
		healthy := 0
		for _, stores := range r.Data {
			for _, s := range stores {
				if s.LastError == nil {
					healthy++
				}
			}
		}
		return healthy == 3
	}, time.Minute, 100*time.Millisecond, "Thanos Query finds the three receivers")

	file := fleetRuleFile(t, 1)
	recs := recordNames(t, file)
	want := evalFleet(t, file, recs, nil, "a", "b")

	// One rule a group, in the file's order.
	eachFile := writeRuleFile(t, filepath.Join(t.TempDir(), "each.yml"), oneRuleGroups(t, file)...)

	ev, err := ruleeval.NewWithQuery(t.TempDir(), time.Minute, thanosQuery(query.URL), eachFile)
	require.NoError(t, err)
	defer ev.Close()
	for m := range fleetMinutes {
		ts := fleetStart.Add(time.Duration(m) * time.Minute).UnixMilli()
		byCluster := map[string][]ruleeval.Sample{}
		fleetSeries(nil, []string{"a", "b"}, func(ls labels.Labels, v float64) {
			c := ls.Get(names.LabelCluster)
			byCluster[c] = append(byCluster[c], ruleeval.Sample{Labels: labels.NewBuilder(ls).Del(names.LabelCluster).Labels(), T: ts, F: v})
		})
		remoteWrite(t, a.write, byCluster["a"])
		remoteWrite(t, b.write, byCluster["b"])
		require.NoError(t, ev.EvalEach(time.UnixMilli(ts), func(rs []prules.Rule) error {
			for _, r := range rs {
				name := r.Name()
				if _, alert := r.(*prules.AlertingRule); alert {
					name = "ALERTS"
				}
				written, err := ev.At(name, ts)
				if err != nil {
					return err
				}
				remoteWrite(t, records.write, written)
			}
			return nil
		}))
	}
	end := fleetStart.Add((fleetMinutes - 1) * time.Minute)
	for _, name := range append(recs, "ALERTS") {
		require.NotEmpty(t, want[name], "%s: the fleet exercises it", name)
		got := instant(t, query.URL, name, end)
		require.Equal(t, rounded(t, want[name]), rounded(t, got), "%s", name)
	}
}

// thanosQuery asks Thanos Query each of the rules' queries, as Thanos
// Ruler does.
func thanosQuery(base string) prules.QueryFunc {
	return func(ctx context.Context, q string, ts time.Time) (promql.Vector, error) {
		u := base + "/api/v1/query?" + url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(ts.UnixMilli())/1000, 'f', 3, 64)}}.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var r struct {
			Status, Error string
			Data          struct {
				ResultType string
				Result     json.RawMessage
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, err
		}
		if r.Status != "success" {
			return nil, fmt.Errorf("thanos query %q: %s", q, r.Error)
		}
		if r.Data.ResultType != "vector" {
			return nil, fmt.Errorf("thanos query %q: a %s, not a vector", q, r.Data.ResultType)
		}
		var series []struct {
			Metric map[string]string
			Value  [2]any
		}
		if err := json.Unmarshal(r.Data.Result, &series); err != nil {
			return nil, err
		}
		out := make(promql.Vector, 0, len(series))
		for _, s := range series {
			v, err := strconv.ParseFloat(s.Value[1].(string), 64)
			if err != nil {
				return nil, err
			}
			out = append(out, promql.Sample{Metric: labels.FromMap(s.Metric), T: ts.UnixMilli(), F: v})
		}
		return out, nil
	}
}

// remoteWrite sends samples to a Thanos Receive with Prometheus's remote
// write protocol, and fails the test unless it takes them.
func remoteWrite(t *testing.T, addr string, samples []ruleeval.Sample) {
	if len(samples) == 0 {
		return
	}
	var req prompb.WriteRequest
	for _, s := range samples {
		var ls []prompb.Label
		s.Labels.Range(func(l labels.Label) {
			if l.Value != "" {
				ls = append(ls, prompb.Label{Name: l.Name, Value: l.Value})
			}
		})
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: ls, Samples: []prompb.Sample{{Value: s.F, Timestamp: s.T}}})
	}
	b, err := req.Marshal()
	require.NoError(t, err)
	hr, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/receive", bytes.NewReader(snappy.Encode(nil, b)))
	require.NoError(t, err)
	hr.Header.Set("Content-Encoding", "snappy")
	hr.Header.Set("Content-Type", "application/x-protobuf")
	hr.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := http.DefaultClient.Do(hr)
	require.NoError(t, err)
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", msg)
}
