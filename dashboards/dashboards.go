// Package dashboards generates gpureclaim's Grafana dashboards as JSON: plain
// dashboards with stable uids, a datasource variable and a unit on every
// panel, written by `make dashboards` and checked by the tests.
package dashboards

import (
	"encoding/json"
	"fmt"
)

// Dashboard is the subset of Grafana's dashboard model gpureclaim uses.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	Description   string     `json:"description"`
	Tags          []string   `json:"tags"`
	Timezone      string     `json:"timezone"`
	Editable      bool       `json:"editable"`
	SchemaVersion int        `json:"schemaVersion"`
	Version       int        `json:"version"`
	Refresh       string     `json:"refresh"`
	Time          TimeRange  `json:"time"`
	Templating    Templating `json:"templating"`
	Panels        []Panel    `json:"panels"`
	Links         []Link     `json:"links"`
}

type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a dashboard variable.
type Variable struct {
	Name       string      `json:"name"`
	Label      string      `json:"label"`
	Type       string      `json:"type"`
	Query      any         `json:"query"`
	Definition string      `json:"definition,omitempty"`
	Datasource *Datasource `json:"datasource,omitempty"`
	Refresh    int         `json:"refresh,omitempty"`
	IncludeAll bool        `json:"includeAll"`
	Multi      bool        `json:"multi"`
	AllValue   string      `json:"allValue,omitempty"`
	Current    struct{}    `json:"current"`
	Sort       int         `json:"sort,omitempty"`
}

type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type Link struct {
	Title    string   `json:"title"`
	Type     string   `json:"type"`
	Tags     []string `json:"tags"`
	AsDrop   bool     `json:"asDropdown"`
	KeepTime bool     `json:"keepTime"`
	Vars     bool     `json:"includeVars"`
}

// Panel is a Grafana panel.
type Panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description,omitempty"`
	GridPos     GridPos        `json:"gridPos"`
	Datasource  *Datasource    `json:"datasource,omitempty"`
	Targets     []Target       `json:"targets,omitempty"`
	FieldConfig FieldConfig    `json:"fieldConfig"`
	Options     map[string]any `json:"options,omitempty"`
	Collapsed   *bool          `json:"collapsed,omitempty"`
	Transforms  []any          `json:"transformations,omitempty"`
}

type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type Target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat,omitempty"`
	Instant      bool        `json:"instant,omitempty"`
	Range        bool        `json:"range,omitempty"`
	Format       string      `json:"format,omitempty"`
	Datasource   *Datasource `json:"datasource"`
}

type FieldConfig struct {
	Defaults  FieldDefaults `json:"defaults"`
	Overrides []any         `json:"overrides"`
}

type FieldDefaults struct {
	Unit     string   `json:"unit"`
	Min      *float64 `json:"min,omitempty"`
	Max      *float64 `json:"max,omitempty"`
	Decimals *int     `json:"decimals,omitempty"`
}

var ds = &Datasource{Type: "prometheus", UID: "${datasource}"}

func f(v float64) *float64 { return &v }

// layout places panels left to right, wrapping at 24 columns.
type layout struct {
	x, y, rowH, id int
	panels         []Panel
}

func (l *layout) add(p Panel, w, h int) {
	if l.x+w > 24 {
		l.x, l.y, l.rowH = 0, l.y+l.rowH, 0
	}
	l.id++
	p.ID = l.id
	p.GridPos = GridPos{H: h, W: w, X: l.x, Y: l.y}
	if p.Type != "row" {
		p.Datasource = ds
		for i := range p.Targets {
			p.Targets[i].RefID = string(rune('A' + i))
			p.Targets[i].Datasource = ds
		}
	}
	if p.FieldConfig.Overrides == nil {
		p.FieldConfig.Overrides = []any{}
	}
	l.x += w
	l.rowH = max(l.rowH, h)
	l.panels = append(l.panels, p)
}

func (l *layout) row(title string) {
	if l.x > 0 {
		l.x, l.y, l.rowH = 0, l.y+l.rowH, 0
	}
	collapsed := false
	l.add(Panel{Type: "row", Title: title, Collapsed: &collapsed, FieldConfig: FieldConfig{Defaults: FieldDefaults{Unit: "none"}}}, 24, 1)
	l.x, l.y, l.rowH = 0, l.y+1, 0
}

func series(title, desc, unit string, targets ...Target) Panel {
	for i := range targets {
		targets[i].Range = true
	}
	p := Panel{Type: "timeseries", Title: title, Description: desc, Targets: targets, FieldConfig: FieldConfig{Defaults: FieldDefaults{Unit: unit}},
		Options: map[string]any{"legend": map[string]any{"displayMode": "table", "placement": "bottom", "calcs": []string{"lastNotNull", "max"}}, "tooltip": map[string]any{"mode": "multi", "sort": "desc"}}}
	if unit == "percentunit" {
		p.FieldConfig.Defaults.Min, p.FieldConfig.Defaults.Max = f(0), f(1)
	}
	return p
}

func stat(title, desc, unit, expr string) Panel {
	return Panel{Type: "stat", Title: title, Description: desc,
		Targets:     []Target{{Expr: expr, Instant: true}},
		FieldConfig: FieldConfig{Defaults: FieldDefaults{Unit: unit}},
		Options:     map[string]any{"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false}, "colorMode": "value", "graphMode": "area"}}
}

func table(title, desc, unit string, targets ...Target) Panel {
	for i := range targets {
		targets[i].Instant, targets[i].Format = true, "table"
	}
	return Panel{Type: "table", Title: title, Description: desc, Targets: targets,
		FieldConfig: FieldConfig{Defaults: FieldDefaults{Unit: unit}},
		Options:     map[string]any{"showHeader": true, "footer": map[string]any{"show": false}},
		Transforms: []any{map[string]any{"id": "organize", "options": map[string]any{
			"excludeByName": map[string]bool{"Time": true, "__name__": true, "job": true, "instance": true}}}}}
}

func datasourceVar() Variable {
	return Variable{Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus"}
}

func queryVar(name, label, query string) Variable {
	return Variable{Name: name, Label: label, Type: "query", Datasource: ds, Refresh: 2, IncludeAll: true, Multi: true, AllValue: ".*", Sort: 1, Definition: query,
		Query: map[string]any{"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1}}
}

func base(uid, title, desc string, vars []Variable, panels []Panel) Dashboard {
	return Dashboard{
		UID: uid, Title: title, Description: desc, Tags: []string{"gpureclaim"}, Timezone: "browser", Editable: true,
		SchemaVersion: 39, Version: 1, Refresh: "30s", Time: TimeRange{From: "now-6h", To: "now"},
		Templating: Templating{List: append([]Variable{datasourceVar()}, vars...)},
		Panels:     panels,
		Links:      []Link{{Title: "gpureclaim", Type: "dashboards", Tags: []string{"gpureclaim"}, AsDrop: true, KeepTime: true, Vars: false}},
	}
}

// All returns every dashboard, keyed by file name.
func All() map[string]Dashboard {
	return map[string]Dashboard{
		"fleet.json":     Fleet(),
		"node.json":      Node(),
		"reclaimer.json": Reclaimer(),
	}
}

// Marshal renders a dashboard as indented JSON.
func Marshal(d Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.UID, err)
	}
	return append(b, '\n'), nil
}
