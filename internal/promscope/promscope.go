// Package promscope keeps a PromQL query to one cluster of a fleet (or to
// the clusters a dashboard picks): every series selector gains a matcher
// on the cluster label, unless it names that label already.
package promscope

import (
	"fmt"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Scope returns expr with m added to each series selector that has no
// matcher on m's label. A nil m returns expr unchanged.
func Scope(expr string, m *labels.Matcher) (string, error) {
	if m == nil {
		return expr, nil
	}
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return "", fmt.Errorf("scoping %q to %s: %w", expr, m, err)
	}
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for _, have := range vs.LabelMatchers {
			if have.Name == m.Name {
				return nil
			}
		}
		vs.LabelMatchers = append(vs.LabelMatchers, m)
		return nil
	})
	return e.String(), nil
}
