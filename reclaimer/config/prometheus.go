package config

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
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
	URL  string     `yaml:"url"`
	HTTP HTTPClient `yaml:",inline"`
	// Timeout of one query. Default 10s.
	Timeout Duration `yaml:"timeout"`
	// Interval between evaluations of restore_when; a workload is restored
	// within one interval of its demand appearing. Default 30s.
	Interval Duration `yaml:"interval"`
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
	if !p.On() {
		if httpClientSet(&p.HTTP) {
			c.errorf("prometheus.url", "is required with prometheus's credentials and TLS settings")
		}
		return
	}
	c.httpClient("prometheus", &p.HTTP)
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
// missing label is an error rather than an empty matcher. Every value is
// escaped for the double-quoted PromQL string the template puts it in (the
// config check makes sure it does), so a label value stays one string
// whatever it holds; the rendered query is parsed before it is returned.
func (p *Policy) RestoreQuery(d RestoreData) (string, error) {
	if p.restoreWhen == nil {
		return "", nil
	}
	q, err := render(p.restoreWhen, d)
	if err != nil {
		return "", err
	}
	if _, err := promql.NewParser(promql.Options{}).ParseExpr(q); err != nil {
		return "", fmt.Errorf("rendered, restore_when is not PromQL (%q): %w", q, err)
	}
	return q, nil
}

// render executes a restore_when with every value escaped.
func render(t *template.Template, d RestoreData) (string, error) {
	escaped := make(RestoreData, len(d))
	for k, v := range d {
		escaped[k] = quoteInner(v)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, escaped); err != nil {
		return "", err
	}
	return b.String(), nil
}

// quoteInner escapes v as the inside of a double-quoted PromQL string
// (PromQL reads Go's escapes).
func quoteInner(v string) string {
	q := strconv.Quote(v)
	return q[1 : len(q)-1]
}

// hostileValue is what the config check renders each label as: every
// character that could end a string or an expression, and the label's name
// to find it again.
func hostileValue(field string) string { return "x\"'`\\\n}) or vector(1) or ({a=\"" + field }

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
var restorable = map[Action]bool{ActionAuto: true, ActionScaleDown: true, ActionStop: true}

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
	if err := plainTemplate(t.Root); err != nil {
		c.errorf(field+".restore_when", "%v: a restore_when reads labels as {{ .label }} only (with if, else, eq, ne, and, or, not), so that the check below sees every value it writes", err)
		return
	}
	// Rendered with a value for every label it reads, it must be PromQL
	// that returns a sample; rendered with hostile values, each must come
	// back whole as one string of the query (so the template puts every
	// value inside a double-quoted string); rendered with empty values (the
	// other branch of an if), it must still be PromQL.
	ks := fields(t.Root)
	hostile, empty := RestoreData{}, RestoreData{}
	for _, k := range ks {
		hostile[k], empty[k] = hostileValue(k), ""
	}
	q, err := render(t, hostile)
	if err != nil {
		c.errorf(field+".restore_when", "%v", err)
		return
	}
	expr, err := promql.NewParser(promql.Options{}).ParseExpr(q)
	if err != nil {
		c.errorf(field+".restore_when", "not PromQL once rendered with hostile label values (%q): %v; put each {{ .label }} inside a double-quoted string", q, err)
		return
	}
	if expr.Type() != promql.ValueTypeVector {
		c.errorf(field+".restore_when", "%q is a %s: give an expression that returns a sample (an instant vector) when the workload is wanted", q, expr.Type())
		return
	}
	strs := literals(expr)
	for _, k := range ks {
		if !strs[hostileValue(k)] {
			c.errorf(field+".restore_when", "{{ .%s }} is not a whole string of the query: put it inside a double-quoted string", k)
			return
		}
	}
	if q, err := render(t, empty); err != nil {
		c.errorf(field+".restore_when", "%v", err)
		return
	} else if _, err := promql.NewParser(promql.Options{}).ParseExpr(q); err != nil {
		c.errorf(field+".restore_when", "not PromQL once rendered with empty label values (%q): %v", q, err)
		return
	}
	p.restoreWhen = t
}

// literals are the strings of a query: its label matchers' values and
// its string literals.
func literals(expr promql.Expr) map[string]bool {
	out := map[string]bool{}
	promql.Inspect(expr, func(n promql.Node, _ []promql.Node) error {
		switch n := n.(type) {
		case *promql.VectorSelector:
			for _, m := range n.LabelMatchers {
				out[m.Value] = true
			}
		case *promql.StringLiteral:
			out[n.Val] = true
		}
		return nil
	})
	return out
}

// plainFuncs are the template functions a restore_when may call: they
// compare and combine, and write no label value.
var plainFuncs = map[string]bool{"eq": true, "ne": true, "and": true, "or": true, "not": true}

// plainTemplate refuses what would let a template write a value the check
// of its PromQL does not render hostile: a key read another way than
// {{ .label }} (index, range over the labels, with and its dot, a
// variable), or a function that rewrites a value (printf, slice, ...).
func plainTemplate(n tmplparse.Node) error {
	switch n := n.(type) {
	case nil:
		return nil
	case *tmplparse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := plainTemplate(c); err != nil {
				return err
			}
		}
	case *tmplparse.TextNode, *tmplparse.StringNode, *tmplparse.NumberNode, *tmplparse.BoolNode:
	case *tmplparse.ActionNode:
		return plainTemplate(n.Pipe)
	case *tmplparse.PipeNode:
		if n == nil {
			return nil
		}
		if len(n.Decl) > 0 {
			return fmt.Errorf("%q declares a variable", n.String())
		}
		for _, c := range n.Cmds {
			if err := plainTemplate(c); err != nil {
				return err
			}
		}
	case *tmplparse.CommandNode:
		for _, a := range n.Args {
			if err := plainTemplate(a); err != nil {
				return err
			}
		}
	case *tmplparse.IdentifierNode:
		if !plainFuncs[n.Ident] {
			return fmt.Errorf("%q is not allowed", n.Ident)
		}
	case *tmplparse.FieldNode:
		if len(n.Ident) != 1 {
			return fmt.Errorf("%q reads a field of a label", n.String())
		}
	case *tmplparse.VariableNode:
		if n.Ident[0] != "$" || len(n.Ident) != 2 {
			return fmt.Errorf("%q is not a label", n.String())
		}
	case *tmplparse.IfNode:
		for _, c := range []tmplparse.Node{n.Pipe, n.List, n.ElseList} {
			if err := plainTemplate(c); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%q is not allowed", n.String())
	}
	return nil
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
	case *tmplparse.VariableNode:
		if n.Ident[0] == "$" && len(n.Ident) > 1 { // $.namespace
			out = append(out, n.Ident[1])
		}
	case *tmplparse.IfNode:
		out = append(append(append(out, fields(n.Pipe)...), fields(n.List)...), fields(n.ElseList)...)
	case *tmplparse.WithNode:
		out = append(append(append(out, fields(n.Pipe)...), fields(n.List)...), fields(n.ElseList)...)
	case *tmplparse.RangeNode:
		out = append(append(append(out, fields(n.Pipe)...), fields(n.List)...), fields(n.ElseList)...)
	}
	return out
}
