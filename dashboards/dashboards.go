// Package dashboards generates gpureclaim's Grafana dashboards as JSON with
// Grafana's own typed builders (grafana-foundation-sdk): stable uids, a
// datasource variable and a unit on every panel, written by `make
// dashboards` and checked by the tests.
package dashboards

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/promscope"
)

// Uids of the dashboards; the alerts link to the node dashboard's.
const (
	FleetUID     = "gpureclaim-fleet"
	NodeUID      = names.NodeDashboardUID
	ReclaimerUID = "gpureclaim-reclaimer"
)

// Target is one query of a panel.
type Target struct {
	Expr         string
	LegendFormat string
}

func ptr[T any](v T) *T { return &v }

// datasource is the dashboards' datasource variable, so that one file works
// against any Prometheus.
var datasource = common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr("${datasource}")}

func dataqueries(targets []Target, instant bool) []cog.Builder[variants.Dataquery] {
	var out []cog.Builder[variants.Dataquery]
	for i, t := range targets {
		q := prometheus.NewDataqueryBuilder().RefId(string(rune('A' + i))).Datasource(datasource).Expr(inClusters(t.Expr))
		if t.LegendFormat != "" {
			q.LegendFormat(t.LegendFormat)
		}
		if instant {
			q.Instant()
		} else {
			q.Range()
		}
		out = append(out, q)
	}
	return out
}

// layout adds panels left to right; the builder wraps them at 24 columns.
type layout struct {
	b *dashboard.DashboardBuilder
}

func newLayout(uid, title, desc string) *layout {
	return &layout{b: dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(desc).
		Tags([]string{"gpureclaim"}).
		Timezone(common.TimeZoneBrowser).
		Editable().
		Refresh("30s").
		Time("now-6h", "now").
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(queryVar(names.LabelCluster, "Cluster", "label_values(gpureclaim_unit_info, "+names.LabelCluster+")")).
		Link(dashboard.NewDashboardLinkBuilder("gpureclaim").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"gpureclaim"}).AsDropdown(true).KeepTime(true).IncludeVars(false))}
}

func (l *layout) row(title string) { l.b.WithRow(dashboard.NewRowBuilder(title)) }

// sized is a panel builder that takes a width and a height.
type sized[B any] interface {
	cog.Builder[dashboard.Panel]
	Span(uint32) B
	Height(uint32) B
}

func add[B sized[B]](l *layout, p B, w, h uint32) {
	p.Span(w)
	p.Height(h)
	l.b.WithPanel(p)
}

func series(title, desc, unit string, targets ...Target) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Datasource(datasource).
		Targets(dataqueries(targets, false)).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementBottom).ShowLegend(true).Calcs([]string{"lastNotNull", "max"})).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	if unit == "percentunit" {
		p.Min(0).Max(1)
	}
	return p
}

func statPanel(title, desc, unit, expr string) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Datasource(datasource).
		Targets(dataqueries([]Target{{Expr: expr}}, true)).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("").Values(false)).
		ColorMode(common.BigValueColorModeValue).
		GraphMode(common.BigValueGraphModeArea)
}

func tablePanel(title, desc, unit string, targets ...Target) *table.PanelBuilder {
	qs := dataqueries(targets, true)
	for _, q := range qs {
		q.(*prometheus.DataqueryBuilder).Format(prometheus.PromQueryFormatTable)
	}
	return table.NewPanelBuilder().Title(title).Description(desc).Unit(unit).Datasource(datasource).
		Targets(qs).
		ShowHeader(true).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]bool{"Time": true, "__name__": true, "job": true, "instance": true}}})
}

func queryVar(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).Label(label).Datasource(datasource).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).IncludeAll(true).Multi(true).AllValue(".*").
		Sort(dashboard.VariableSortAlphabeticalAsc).Definition(query).
		Query(dashboard.StringOrMap{Map: map[string]any{"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1}})
}

// build builds the dashboard and numbers its panels and rows in order.
func (l *layout) build() (dashboard.Dashboard, error) {
	d, err := l.b.Build()
	if err != nil {
		return d, err
	}
	for i, p := range d.Panels {
		id := uint32(i + 1)
		switch {
		case p.Panel != nil:
			p.Panel.Id = &id
		case p.RowPanel != nil:
			p.RowPanel.Id = id
		}
	}
	return d, nil
}

// All builds every dashboard, keyed by file name.
func All() (map[string]dashboard.Dashboard, error) {
	out := map[string]dashboard.Dashboard{}
	for name, l := range map[string]*layout{"fleet.json": fleet(), "node.json": node(), "reclaimer.json": reclaimer()} {
		d, err := l.build()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

// Marshal renders a dashboard as indented JSON.
func Marshal(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Grafana's range variables stand as durations no query uses while a query
// is parsed, and are put back after.
var rangeVars = []struct{ name, stand string }{
	{"$__rate_interval", "1111s"}, {"$__range", "2222s"}, {"$__interval", "3333s"},
}

// clusterMatcher keeps a query to the clusters picked in the cluster
// variable; with none picked (All: .*) it matches series without the label too.
var clusterMatcher = labels.MustNewMatcher(labels.MatchRegexp, names.LabelCluster, "$"+names.LabelCluster)

// inClusters adds the cluster variable's matcher to every selector of a
// query that has none on the cluster label.
func inClusters(expr string) string {
	q := expr
	for _, v := range rangeVars {
		q = strings.ReplaceAll(q, v.name, v.stand)
	}
	q, err := promscope.Scope(q, clusterMatcher)
	if err != nil {
		panic(fmt.Sprintf("a dashboard query does not parse: %v", err)) // a bug in the generator
	}
	for _, v := range rangeVars {
		d, _ := model.ParseDuration(v.stand)
		q = strings.ReplaceAll(q, "["+d.String()+"]", "["+v.name+"]")
	}
	return q
}
