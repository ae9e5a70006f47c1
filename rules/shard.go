package rules

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// maxShards bounds the shards: each is a group of the rules.
const maxShards = 256

// ShardName is shard k's value of the shard label, as Prometheus's
// hashmod relabeling writes it.
func ShardName(k int) string { return strconv.Itoa(k) }

// ShardRelabeling is the scrape relabeling that puts a target's series in
// one of n shards, by the hash of its address: every series of a node
// goes to the same shard, which the rules select by an equality matcher
// (an index lookup, not a scan).
func ShardRelabeling(n int) string {
	return fmt.Sprintf(`- source_labels: [__address__]
  modulus: %d
  target_label: %s
  action: hashmod`, n, names.LabelShard)
}

// ksmPrefix begins the names of kube-state-metrics' series, which the idle
// classes read.
const ksmPrefix = "kube_"

// unlabeledShard names the group, and the records, of the series a target
// scraped without the relabeling sends: they are computed, not dropped.
const unlabeledShard = "none"

// shard restricts every selector of the rules to one shard: the units
// (records and alerts) of one shard are computed in one group, from its
// units' series alone. name is the shard's value of the label on the
// records the group writes and reads; input, on the scraped series ("" for
// the unlabeled ones).
func shard(rs []Rule, name, input string) ([]Rule, error) {
	out := make([]Rule, len(rs))
	p := parser.NewParser(parser.Options{})
	inputs := labels.MustNewMatcher(labels.MatchEqual, names.LabelShard, input)
	records := labels.MustNewMatcher(labels.MatchEqual, names.LabelShard, name)
	for i, r := range rs {
		expr, err := p.ParseExpr(string(r.Expr))
		if err != nil {
			return nil, fmt.Errorf("%s%s: %w", r.Record, r.Alert, err)
		}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				if strings.HasPrefix(vs.Name, ksmPrefix) {
					return nil // kube-state-metrics' series are the cluster's, in no node's shard
				}
				// A recording rule's name has colons; a scraped metric's none.
				m := inputs
				if strings.Contains(vs.Name, ":") {
					m = records
				}
				vs.LabelMatchers = append(vs.LabelMatchers, m)
			}
			return nil
		})
		// One line: a large fleet's file holds many shards.
		r.Expr = Expr(expr.String())
		// Each shard's series carry it, so that no two groups write the
		// same series (promtool's lint and Prometheus both refuse that),
		// and a later rule of the shard finds them.
		ls := map[string]string{names.LabelShard: name}
		for k, v := range r.Labels {
			ls[k] = v
		}
		r.Labels = ls
		out[i] = r
	}
	return out, nil
}
