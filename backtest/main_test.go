package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// traceFile writes a trace CSV: pod "gone" idles for good after an hour, pod
// "busy" never does.
func traceFile(t *testing.T) string {
	var b strings.Builder
	b.WriteString("timestamp,pod,gpu_duty_cycle_percent,gpu_memory_used_bytes\n")
	for m := range 240 {
		gone := 80
		if m >= 60 {
			gone = 0
		}
		fmt.Fprintf(&b, "%d,gone,%d,21474836480\n%d,busy,90,21474836480\n", 1700000000+60*m, gone, 1700000000+60*m)
	}
	p := filepath.Join(t.TempDir(), "trace.csv")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

func TestBacktestCommand(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "gone.svg")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--history.trace=" + traceFile(t), "--rules=../rules/gpureclaim.rules.yml",
		"--history.controller=Deployment", "--format=json", "--plot.workload=gone", "--plot.file=" + plot}, &out, &errb)
	require.Zero(t, code, errb.String())
	var rep struct {
		Total struct {
			Workloads int            `json:"workloads"`
			Reclaims  int            `json:"reclaims"`
			ByAction  map[string]int `json:"reclaims_by_action"`
			Idle      float64        `json:"idle_gpu_minutes"`
		} `json:"total"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Equal(t, 2, rep.Total.Workloads)
	require.Equal(t, map[string]int{"scale_down": 1}, rep.Total.ByAction)
	require.Equal(t, 180.0, rep.Total.Idle)
	svg, err := os.ReadFile(plot)
	require.NoError(t, err)
	require.Contains(t, string(svg), "<svg")
	require.Contains(t, string(svg), "gone: reclaimed 1 times")
}

// The bounds need no rules: pod "gone" idles for its last three hours and
// never works again (every idle minute is reclaimable), so acting at once
// frees all of them but the minute it acts in, and acting an hour in two
// of the three.
func TestBacktestBounds(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--history.trace=" + traceFile(t), "--report.bounds", "--bound.delays=0s,1h", "--bound.cold-starts=1"}, &out, &errb)
	require.Zero(t, code, errb.String())
	require.Equal(t, `| acts after | cold starts per workload-day | freed, all |
| --- | --- | --- |
| 0s | 1 | 99% |
| 1h | 1 | 66% |
`, out.String())
}

// Quiet's ceiling for the shipped serving class: pod "gone" has not been
// held for the 4 hours quiet looks back, so it waits its 90 minutes and
// the grace; over the last hour it was busy for 50 minutes of 60 when
// quiet could first fire, so a share over that takes it 10 minutes in.
// With a reclaim_after of 30 minutes it waits 30 minutes on the 4 hours.
func TestBacktestCeiling(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--history.trace=" + traceFile(t), "--report.bounds", "--bound.delays=25m", "--bound.cold-starts=1",
		"--ceiling.config=../rules/classes.yaml", "--ceiling.class=serving", "--ceiling.unit-windows=4h,1h", "--ceiling.reclaim-afters=1h30m,30m"}, &out, &errb)
	require.Zero(t, code, errb.String())
	require.Equal(t, `| acts after | cold starts per workload-day | freed, all |
| --- | --- | --- |
| 25m | 1 | 86% |

quiet's ceiling: fires 10m or 1h30m into a pause, acts 15m later

| unit window | cold starts per workload-day | freed, all (unit_busy_below, spent) |
| --- | --- | --- |
| 4h | 1 | 41.1% (0, 0.00) |
| 1h | 1 | 85.6% (0.835, 0.00) |

quiet's ceiling: fires 10m or 30m into a pause, acts 15m later

| unit window | cold starts per workload-day | freed, all (unit_busy_below, spent) |
| --- | --- | --- |
| 4h | 1 | 74.4% (0, 0.00) |
| 1h | 1 | 85.6% (0.835, 0.00) |
`, out.String())
}

func TestBacktestBadFlags(t *testing.T) {
	tr := traceFile(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--rules=r.yml"}, 2, "give one history"},
		{[]string{"--history.trace=" + tr}, 2, "--rules: give the rule files"},
		{[]string{"--history.trace=" + tr, "--rules=r.yml", "--format=xml"}, 2, `--format: "xml" is not text, markdown or json`},
		{[]string{"--history.trace=" + tr, "--rules=../rules/gpureclaim.rules.yml", "--history.controller=CronJob"}, 1, `--history.controller: "CronJob" is not a workload kind the config knows`},
		{[]string{"--history.trace=" + tr, "--rules=r.yml", "--idle.threshold=2"}, 2, "--idle.threshold: 2 must be between 0 and 1"},
		{[]string{"--history.trace=" + tr, "--rules=/nonexistent.yml"}, 1, "nonexistent.yml"},
		{[]string{"--history.trace=/nonexistent.csv", "--rules=r.yml"}, 1, "--history.trace"},
		{[]string{"--history.trace=" + tr, "--rules=../rules/gpureclaim.rules.yml", "--config.file=/nonexistent.yml"}, 1, "nonexistent.yml"},
		{[]string{"--history.trace=" + tr, "--report.bounds", "--bound.delays=15m,soon"}, 2, `--bound.delays: "soon" is not a duration of 0 or more`},
		{[]string{"--history.trace=" + tr, "--report.bounds", "--bound.cold-starts=-1"}, 2, `--bound.cold-starts: "-1" is not a number of 0 or more`},
		{[]string{"--history.trace=" + tr, "--rules=r.yml", "--ceiling.config=../rules/classes.yaml"}, 2, "--ceiling.config: give it with --report.bounds"},
		{[]string{"--history.trace=" + tr, "--report.bounds", "--ceiling.config=../rules/classes.yaml", "--ceiling.unit-windows=4h,0s"}, 2, `--ceiling.unit-windows: "0s" is not a positive duration`},
		{[]string{"--history.trace=" + tr, "--report.bounds", "--ceiling.config=../rules/classes.yaml", "--ceiling.afters=5m,-5m"}, 2, `--ceiling.afters: "-5m" is not a positive duration`},
		{[]string{"--history.trace=" + tr, "--report.bounds", "--ceiling.config=../rules/classes.yaml", "--ceiling.reclaim-afters=later"}, 2, `--ceiling.reclaim-afters: "later" is not a positive duration`},
		{[]string{"--history.trace=" + tr, "--report.bounds", "--ceiling.config=../rules/classes.yaml", "--ceiling.class=training"}, 1, "--ceiling.class: training has no quiet in ../rules/classes.yaml (classes with one: serving)"},
		{[]string{"--history.trace=" + tr, "--report.bounds", "--ceiling.config=/nonexistent.yaml"}, 1, "--ceiling.config: open /nonexistent.yaml"},
		{[]string{"--history.trace=" + tr, "--rules=../rules/gpureclaim.rules.yml", "--plot.workload=nobody", "--plot.file=" + filepath.Join(t.TempDir(), "p.svg")}, 1, `no workload "nobody"`},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.want, tc.args)
	}
}
