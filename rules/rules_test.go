package rules

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/testkit/configtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

func TestCommittedRulesMatchTheGenerator(t *testing.T) {
	for file, config := range map[string]string{"gpureclaim.rules.yml": "", "gpureclaim-dcgm.rules.yml": "dcgm.yaml", "gpureclaim-classes.rules.yml": "classes.yaml"} {
		c := DefaultConfig()
		if config != "" {
			var err error
			c, err = Load(config)
			require.NoError(t, err)
		}
		want, err := Render(c)
		require.NoError(t, err)
		got, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%s: run `make rules` and commit the result", file)
	}
}

func TestPromtoolCheckAndTest(t *testing.T) {
	promtool := tooltest.Bin(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", "gpureclaim.rules.yml", "gpureclaim-dcgm.rules.yml", "gpureclaim-classes.rules.yml").CombinedOutput()
	require.NoError(t, err, "%s", out)
	tests, err := filepath.Glob("tests/*.test.yml")
	require.NoError(t, err)
	require.NotEmpty(t, tests)
	dcgm, err := filepath.Glob("tests/dcgm/*.test.yml")
	require.NoError(t, err)
	require.NotEmpty(t, dcgm)
	classes, err := filepath.Glob("tests/classes/*.test.yml")
	require.NoError(t, err)
	require.NotEmpty(t, classes)
	tests = append(append(tests, dcgm...), classes...)
	out, err = exec.Command(promtool, append([]string{"test", "rules"}, tests...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

func TestEveryConfigRendersValidRules(t *testing.T) {
	promtool := tooltest.Bin(t, "promtool")
	for _, path := range []string{"testdata/conf.good.yml", "demo.yaml", "dcgm.yaml", "classes.yaml"} {
		c, err := Load(path)
		require.NoError(t, err, path)
		b, err := Render(c)
		require.NoError(t, err)
		f := filepath.Join(t.TempDir(), "rules.yml")
		require.NoError(t, os.WriteFile(f, b, 0o644))
		out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput()
		require.NoError(t, err, "%s: %s", path, out)
	}
}

// With honor_labels, dcgm-exporter's pod mapping keeps its own label names.
func TestDCGMWithHonorLabels(t *testing.T) {
	promtool := tooltest.Bin(t, "promtool")
	c, err := Load("testdata/conf.good.yml")
	require.NoError(t, err)
	require.True(t, c.DCGM.HonorLabels)
	b, err := Render(c)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yml"), b, 0o644))
	test, err := os.ReadFile("testdata/dcgm-honor-labels.test.yml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "honor.test.yml"), test, 0o644))
	out, err := exec.Command(promtool, "test", "rules", filepath.Join(dir, "honor.test.yml")).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// Without gpureclaim's exporter nothing can kill a process or knows the
// MIG profiles a GPU can make: the dcgm rules never suggest kill and have
// no right-sizing.
func TestDCGMRulesDegrade(t *testing.T) {
	c, err := Load("dcgm.yaml")
	require.NoError(t, err)
	for _, g := range Generate(c).Groups {
		for _, r := range g.Rules {
			require.NotContains(t, string(r.Expr), `"kill"`, r.Alert+r.Record)
			require.NotContains(t, string(r.Expr), "gpureclaim_exporter_", r.Alert+r.Record)
			require.NotEqual(t, names.AlertMIGOversized, r.Alert)
			require.NotContains(t, r.Record, "rightsize")
		}
	}
}

func TestGoodConfigChangesEveryField(t *testing.T) {
	c, err := Load("testdata/conf.good.yml")
	require.NoError(t, err)
	// A field the file forgot would keep its default and hide a parsing bug.
	var walk func(path string, a, b map[string]any)
	walk = func(path string, a, b map[string]any) {
		for k, v := range a {
			if sub, ok := v.(map[string]any); ok {
				walk(path+k+".", sub, b[k].(map[string]any))
				continue
			}
			require.NotEqual(t, v, b[k], "%s%s keeps its default", path, k)
		}
	}
	walk("", asMap(t, DefaultConfig()), asMap(t, c))
}

func asMap(t *testing.T, c Config) map[string]any {
	b, err := yaml.Marshal(c)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m))
	return m
}

func TestBadConfigsNameTheField(t *testing.T) {
	configtest.BadCases(t, func(path string) error {
		_, err := Load(path)
		return err
	})
}

func TestEmptyConfigIsTheDefault(t *testing.T) {
	c, err := Parse(nil)
	require.NoError(t, err)
	require.Equal(t, DefaultConfig(), c)
	c, err = Parse([]byte("idle: {for: 20m}\n"))
	require.NoError(t, err)
	require.Equal(t, model.Duration(20*60e9), c.Idle.For)
	require.Equal(t, DefaultConfig().Idle.Threshold, c.Idle.Threshold, "a field left out keeps its default")
}

// Every alert has what people need (kubernetes-mixin's checks): a severity,
// a summary, a description, a runbook section that exists, and the labels
// the reclaimer needs.
func TestAlertsCarryWhatPeopleAndTheReclaimerNeed(t *testing.T) {
	runbook, err := os.ReadFile("runbook.md")
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\w+)$`).FindAllStringSubmatch(string(runbook), -1) {
		anchors[strings.ToLower(m[1])] = true
	}
	c := DefaultConfig()
	alerts := map[string][]string{}
	for _, g := range Generate(c).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = append(alerts[r.Alert], r.Labels["audience"])
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.NotEmpty(t, r.Annotations["description"], r.Alert)
			anchor := strings.TrimPrefix(r.Annotations["runbook_url"], c.Links.Runbook+"#")
			require.Equal(t, strings.ToLower(r.Alert), anchor, r.Alert)
			require.True(t, anchors[anchor], "runbook.md has no section ## %s", r.Alert)
			if g.Name == "gpureclaim.units" || g.Name == packingGroup {
				require.Contains(t, r.Annotations, "dashboard_url", r.Alert)
				require.True(t, r.Labels["action"] != "" || strings.Contains(string(r.Expr), `"action"`), "%s says what to do", r.Alert)
			}
		}
	}
	require.Len(t, alerts, 10)
	require.Len(t, anchors, len(alerts), "runbook.md has a section for each alert and no other")
	for _, a := range []string{names.AlertIdle, names.AlertWasted, names.AlertOvercommitted, names.AlertMIGOversized, names.AlertPackable} {
		require.Equal(t, []string{names.AudiencePeople, names.AudienceReclaimer}, alerts[a], "%s comes once for people, once for the reclaimer", a)
	}
}

func TestRecordingRulesAreNamedLevelMetricOperations(t *testing.T) {
	name := regexp.MustCompile(`^[a-z_]+:gpureclaim_[a-z_]+:[a-z_0-9]+$`)
	seen := map[string]bool{}
	for _, g := range Generate(DefaultConfig()).Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			require.Regexp(t, name, r.Record)
			require.False(t, seen[r.Record], "%s recorded twice", r.Record)
			seen[r.Record] = true
		}
	}
}

// Every aggregation of every generated rule keeps the cluster label, and
// every match on labels matches on it: a rule written later without it
// would merge two clusters' pods of the same name.
func TestEveryAggregationKeepsTheCluster(t *testing.T) {
	for _, file := range []string{"", "classes.yaml", "dcgm.yaml", "testdata/conf.good.yml"} {
		c := DefaultConfig()
		if file != "" {
			var err error
			c, err = Load(file)
			require.NoError(t, err)
		}
		for _, g := range Generate(c).Groups {
			for _, r := range g.Rules {
				expr, err := parser.NewParser(parser.Options{}).ParseExpr(string(r.Expr))
				require.NoError(t, err)
				parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
					switch n := node.(type) {
					case *parser.AggregateExpr:
						if !n.Without {
							require.Contains(t, n.Grouping, c.ClusterLabel, "%s %s%s: %s", file, r.Record, r.Alert, n)
						}
					case *parser.BinaryExpr:
						if m := n.VectorMatching; m != nil && m.On && len(m.MatchingLabels) > 0 {
							require.Contains(t, m.MatchingLabels, c.ClusterLabel, "%s %s%s: %s", file, r.Record, r.Alert, n)
						}
					}
					return nil
				})
			}
		}
	}
}

// The last-busy record is kept for the pause history's window, else a
// day, and at least as long as the longest wait quiet times with it.
func TestIdleSinceKeep(t *testing.T) {
	for _, tc := range []struct {
		config string
		keep   string
	}{
		{"idle: {pauses: {window: 6h}}\n", "(time() - 21600)"},
		{"idle: {quiet: {}}\n", "(time() - 86400)"},
		{"idle: {reclaim_after: 30h, quiet: {}}\n", "(time() - 108000)"},
		{"idle: {pauses: {window: 6h}, reclaim_after: 8h, quiet: {}}\n", "(time() - 28800)"},
	} {
		c, err := Parse([]byte(tc.config))
		require.NoError(t, err, tc.config)
		var found bool
		for _, g := range Generate(c).Groups {
			for _, r := range g.Rules {
				if r.Record == names.RecIdleSince {
					found = true
					require.Contains(t, string(r.Expr), tc.keep, tc.config)
				}
			}
		}
		require.True(t, found, tc.config)
	}
}

// Quiets names the default class by its name whether or not classes are
// configured, and gives each class its own reclaim_after.
func TestQuiets(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   map[string]model.Duration // reclaim_after by class
	}{
		{"idle: {reclaim_after: 2h, quiet: {}}\n", map[string]model.Duration{DefaultClass: model.Duration(2 * time.Hour)}},
		{"idle: {reclaim_after: 2h}\n", map[string]model.Duration{}},
		{"idle:\n  reclaim_after: 2h\n  quiet: {}\n  classes:\n  - {name: serving, match: [{owner_kinds: [ReplicaSet]}], reclaim_after: 90m, quiet: {}}\n  - {name: batch, match: [{namespaces: [batch]}]}\n",
			map[string]model.Duration{DefaultClass: model.Duration(2 * time.Hour), "serving": model.Duration(90 * time.Minute)}},
	} {
		c, err := Parse([]byte(tc.config))
		require.NoError(t, err, tc.config)
		got := map[string]model.Duration{}
		for name, k := range c.Quiets() {
			require.NotNil(t, k.Quiet, tc.config)
			got[name] = k.ReclaimAfter
		}
		require.Equal(t, tc.want, got, tc.config)
	}
}
