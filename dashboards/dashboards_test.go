package dashboards

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/rules"
)

func TestCommittedDashboardsMatchTheGenerator(t *testing.T) {
	files, err := filepath.Glob("*.json")
	require.NoError(t, err)
	all, err := All()
	require.NoError(t, err)
	require.Len(t, files, len(all), "a dashboard file the generator does not write")
	for name, d := range all {
		want, err := Marshal(d)
		require.NoError(t, err)
		got, err := os.ReadFile(name)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "run `make dashboards` and commit the result")
	}
}

// queries returns every PromQL expression in a dashboard file, with where
// it is, including the variables' label_values selectors.
func queries(t *testing.T, d map[string]any) map[string]string {
	out := map[string]string{}
	for _, v := range d["templating"].(map[string]any)["list"].([]any) {
		v := v.(map[string]any)
		if v["type"] != "query" {
			continue
		}
		q := v["query"].(map[string]any)["query"].(string)
		m := regexp.MustCompile(`^label_values\((.*), *\w+\)$`).FindStringSubmatch(q)
		require.NotNil(t, m, "variable %s: %s", v["name"], q)
		out["variable "+v["name"].(string)] = m[1]
	}
	for _, p := range d["panels"].([]any) {
		p := p.(map[string]any)
		for i, tg := range asList(p["targets"]) {
			out[p["title"].(string)+" #"+string(rune('A'+i))] = tg.(map[string]any)["expr"].(string)
		}
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// grafanaVars stand in for what Grafana substitutes before a query runs.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h", "${datasource}", "prom", "$node", "n1", "$uuid", "GPU-1", "$cluster", ".*")

// known lists the metrics a query may name: METRICS.md's, the recording
// rules', and Prometheus's own.
func known(t *testing.T) map[string]bool {
	k := map[string]bool{"ALERTS": true, "ALERTS_FOR_STATE": true, "up": true}
	b, err := os.ReadFile("../METRICS.md")
	require.NoError(t, err)
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (\\w+)").FindAllStringSubmatch(string(b), -1) {
		k[m[1]] = true
		if m[2] == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				k[m[1]+suffix] = true
			}
		}
	}
	groups, errs := rulefmt.ParseFile("../rules/gpureclaim.rules.yml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), nil)
	require.Empty(t, errs)
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				k[r.Record] = true
			}
		}
	}
	return k
}

// identity are the labels that name a thing one cluster may name as
// another does.
var identity = map[string]bool{"uuid": true, "gpu_uuid": true, "node": true, "instance": true, "namespace": true, "pod": true, "user": true}

func TestDashboards(t *testing.T) {
	metrics := known(t)
	p := parser.NewParser(parser.Options{})
	all, err := All()
	require.NoError(t, err)
	for name := range all {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(name)
			require.NoError(t, err)
			var d map[string]any
			require.NoError(t, json.Unmarshal(b, &d), "valid JSON")
			require.Regexp(t, `^gpureclaim-[a-z]+$`, d["uid"])

			vars := d["templating"].(map[string]any)["list"].([]any)
			require.Equal(t, "datasource", vars[0].(map[string]any)["type"], "a datasource variable comes first")

			ids := map[float64]bool{}
			for _, pn := range d["panels"].([]any) {
				pn := pn.(map[string]any)
				title := pn["title"].(string)
				require.False(t, ids[pn["id"].(float64)], "panel id %v twice", pn["id"])
				ids[pn["id"].(float64)] = true
				if pn["type"] == "row" {
					continue
				}
				require.Equal(t, "${datasource}", pn["datasource"].(map[string]any)["uid"], "%s: datasource templated", title)
				for _, tg := range asList(pn["targets"]) {
					require.Equal(t, "${datasource}", tg.(map[string]any)["datasource"].(map[string]any)["uid"], "%s: target datasource templated", title)
				}
				unit, _ := pn["fieldConfig"].(map[string]any)["defaults"].(map[string]any)["unit"].(string)
				require.NotEmpty(t, unit, "%s: a unit", title)
				require.NotEmpty(t, pn["description"], "%s: a description", title)
			}

			for where, q := range queries(t, d) {
				expr, err := p.ParseExpr(grafanaVars.Replace(q))
				require.NoError(t, err, "%s: %s", where, q)
				parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
					switch n := node.(type) {
					case *parser.VectorSelector:
						require.True(t, metrics[n.Name], "%s names %q, which is neither in METRICS.md nor recorded", where, n.Name)
						if where != "variable cluster" { // the one query over every cluster
							require.True(t, slices.ContainsFunc(n.LabelMatchers, func(m *labels.Matcher) bool { return m.Name == "cluster" }),
								"%s: %s reads every cluster, not those picked", where, n)
						}
					case *parser.AggregateExpr:
						// Two clusters may name a node, a UUID or a pod
						// alike: a query that splits by one keeps the
						// cluster (a split by kind or action may add the
						// clusters up).
						if !n.Without && slices.ContainsFunc(n.Grouping, func(l string) bool { return identity[l] }) {
							require.Contains(t, n.Grouping, "cluster", "%s: %s", where, n)
						}
					case *parser.BinaryExpr:
						if m := n.VectorMatching; m != nil && m.On && len(m.MatchingLabels) > 0 {
							require.Contains(t, m.MatchingLabels, "cluster", "%s: %s", where, n)
						}
					case *parser.Call:
						switch n.Func.Name {
						case "rate", "irate":
							require.Contains(t, q, "[$__rate_interval]", "%s: %s over $__rate_interval", where, n.Func.Name)
						case "increase":
							require.Regexp(t, `\[\$__(rate_interval|range)\]`, q, "%s: increase over $__rate_interval or the dashboard's range", where)
						}
					}
					return nil
				})
			}
		})
	}
}

// The alerts link to the node dashboard by uid (a unit's), or to the
// fleet's (an allocation's); the uids must not move.
func TestAlertLinksPointAtTheNodeDashboard(t *testing.T) {
	c := rules.DefaultConfig()
	for _, g := range rules.Generate(c).Groups {
		for _, r := range g.Rules {
			if u := r.Annotations["dashboard_url"]; u != "" {
				require.Regexp(t, "/d/("+NodeUID+"|"+FleetUID+")/", u, r.Alert)
			}
		}
	}
}
