package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// clustered keeps the cluster label through every rule: each aggregation
// by labels (and each one by none, a fleet's sum) is by the cluster too,
// and each match on labels matches on it too, so that the records and
// alerts of several clusters in one engine stay apart and carry their
// cluster. On series without the label (one cluster) the results are the
// same. A match on no labels (on ()) is left alone: it joins a series of
// no cluster (the GPU-hour price) to every cluster's. "or vector(0)"
// becomes "or on () vector(0)": a zero only when no cluster has a series.
func clustered(rs []Rule, label string) ([]Rule, error) {
	out := make([]Rule, len(rs))
	p := parser.NewParser(parser.Options{})
	for i, r := range rs {
		expr, err := p.ParseExpr(string(r.Expr))
		if err != nil {
			return nil, fmt.Errorf("%s%s: %w", r.Record, r.Alert, err)
		}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			switch n := node.(type) {
			case *parser.AggregateExpr:
				if !n.Without && !slices.Contains(n.Grouping, label) {
					n.Grouping = append([]string{label}, n.Grouping...)
				}
			case *parser.BinaryExpr:
				m := n.VectorMatching
				switch {
				case m == nil:
				case n.Op == parser.LOR && isVectorCall(n.RHS):
					m.On, m.MatchingLabels = true, nil
				case m.On && len(m.MatchingLabels) > 0 && !slices.Contains(m.MatchingLabels, label):
					m.MatchingLabels = append([]string{label}, m.MatchingLabels...)
				}
			}
			return nil
		})
		s := expr.String()
		if strings.Contains(string(r.Expr), "\n") {
			s = expr.Pretty(0) + "\n"
		}
		r.Expr = Expr(s)
		out[i] = r
	}
	return out, nil
}

// isVectorCall says whether an expression is vector(...), maybe in parentheses.
func isVectorCall(e parser.Expr) bool {
	for {
		switch n := e.(type) {
		case *parser.ParenExpr:
			e = n.Expr
		case *parser.Call:
			return n.Func.Name == "vector"
		default:
			return false
		}
	}
}
