package config

import (
	"bytes"
	"errors"
	"text/template"
	tmplparse "text/template/parse"
	"time"

	promql "github.com/prometheus/prometheus/promql/parser"
)

// Prometheus is where the reclaimer asks whether a reclaimed workload is
// wanted again: the policies' restore_when.
type Prometheus struct {
	// URL of Prometheus's HTTP API (or anything that answers
	// /api/v1/query: Thanos Query, Mimir). Empty: off.
	URL string `yaml:"url"`
	// BearerTokenFile authenticates the queries.
	BearerTokenFile string `yaml:"bearer_token_file"`
	// Timeout of one query. Default 10s.
	Timeout Duration `yaml:"timeout"`
	// Interval between evaluations of restore_when; a workload is restored
	// within one interval of its demand appearing. Default 30s.
	Interval Duration `yaml:"interval"`

	BearerToken string `yaml:"-"`
}

// On says whether the reclaimer queries Prometheus.
func (p Prometheus) On() bool { return p.URL != "" }

func (p *Prometheus) validate(c *checker) {
	c.url("prometheus.url", p.URL, false)
	c.duration("prometheus.timeout", &p.Timeout, 10*time.Second)
	c.duration("prometheus.interval", &p.Interval, 30*time.Second)
	if p.Interval > 0 && p.Interval < Duration(time.Second) {
		c.errorf("prometheus.interval", "%s is under a second", time.Duration(p.Interval))
	}
	if !p.On() && p.BearerTokenFile != "" {
		c.errorf("prometheus.url", "is required with prometheus.bearer_token_file")
	}
	p.BearerToken = c.secret("prometheus.bearer_token_file", p.BearerTokenFile)
}

// RestoreData is what a restore_when template reads: the reclaim's alert
// labels ({{ .namespace }}, {{ .pod }}) and its workload's
// ({{ .workload_kind }}, {{ .workload_name }}).
type RestoreData map[string]string

// Workload label keys a restore_when template may read besides the
// alert's labels.
const (
	RestoreWorkloadKind      = "workload_kind"
	RestoreWorkloadName      = "workload_name"
	RestoreWorkloadNamespace = "workload_namespace"
)

// RestoreQuery renders the policy's restore_when for one reclaim; a
// missing label is an error rather than an empty matcher.
func (p *Policy) RestoreQuery(d RestoreData) (string, error) {
	if p.restoreWhen == nil {
		return "", nil
	}
	var b bytes.Buffer
	if err := p.restoreWhen.Execute(&b, d); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Restorable says whether the policy's action can be undone, so that a
// restore_when may bring the workload back.
func (p *Policy) Restorable() bool { return restorable[p.Action] }

// SetRestoreWhen sets restore_when after loading (the backtest's demand),
// checked as the file's would be but for the Prometheus it needs.
func (p *Policy) SetRestoreWhen(expr string) error {
	c := &checker{}
	p.RestoreWhen = expr
	p.validateRestore(c, "restore_when", Prometheus{URL: "http://unused"})
	return errors.Join(c.errs...)
}

// restorable are the actions whose workload can be brought back.
var restorable = map[string]bool{ActionAuto: true, ActionScaleDown: true, ActionStop: true}

func (p *Policy) validateRestore(c *checker, field string, prom Prometheus) {
	p.restoreWhen = nil
	p.RestoreWithin = c.optDuration(field+".restore_within", p.RestoreWithin, 24*time.Hour)
	if p.RestoreWhen == "" {
		return
	}
	if !prom.On() {
		c.errorf(field+".restore_when", "is evaluated against Prometheus: set prometheus.url")
	}
	if !restorable[p.Action] {
		c.errorf(field+".restore_when", "action %s cannot be undone: give it to a policy that scales down or stops (auto, scale_down, stop)", p.Action)
	}
	t, err := template.New(field).Option("missingkey=error").Parse(p.RestoreWhen)
	if err != nil {
		c.errorf(field+".restore_when", "%v", err)
		return
	}
	// Rendered with a value for every label it reads, it must be PromQL.
	sample := RestoreData{}
	for _, k := range fields(t.Root) {
		sample[k] = "x"
	}
	var b bytes.Buffer
	if err := t.Execute(&b, sample); err != nil {
		c.errorf(field+".restore_when", "%v", err)
		return
	}
	expr, err := promql.NewParser(promql.Options{}).ParseExpr(b.String())
	if err != nil {
		c.errorf(field+".restore_when", "not PromQL once rendered (%q): %v", b.String(), err)
		return
	}
	if expr.Type() != promql.ValueTypeVector {
		c.errorf(field+".restore_when", "%q is a %s: give an expression that returns a sample (an instant vector) when the workload is wanted", b.String(), expr.Type())
		return
	}
	p.restoreWhen = t
}

// fields are the keys a template reads ({{ .namespace }}), to check its
// PromQL before any reclaim fills it.
func fields(n tmplparse.Node) []string {
	var out []string
	switch n := n.(type) {
	case *tmplparse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			out = append(out, fields(c)...)
		}
	case *tmplparse.ActionNode:
		out = append(out, fields(n.Pipe)...)
	case *tmplparse.PipeNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Cmds {
			out = append(out, fields(c)...)
		}
	case *tmplparse.CommandNode:
		for _, a := range n.Args {
			out = append(out, fields(a)...)
		}
	case *tmplparse.FieldNode:
		out = append(out, n.Ident[0])
	case *tmplparse.IfNode:
		out = append(append(append(out, fields(n.Pipe)...), fields(n.List)...), fields(n.ElseList)...)
	case *tmplparse.WithNode:
		out = append(append(append(out, fields(n.Pipe)...), fields(n.List)...), fields(n.ElseList)...)
	case *tmplparse.RangeNode:
		out = append(append(append(out, fields(n.Pipe)...), fields(n.List)...), fields(n.ElseList)...)
	}
	return out
}
