// Package trace reads per-minute GPU utilization traces (the format of
// traces/genai-pods.csv.gz): the simulator replays them, the backtest
// reads them as history. It depends on nothing of either.
package trace

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Trace is a loaded trace file: per workload, one sample per step.
type Trace struct {
	// Step is the interval the trace was sampled at (its most common gap
	// between timestamps), so that no sample takes another's place: 57 s
	// for traces/genai-pods.csv.gz.
	Step  time.Duration
	Start time.Time
	// Duty and Memory hold one value per step from Start; NaN where not sampled.
	Duty, Memory map[string][]float64
}

// Workloads lists the trace's workload ids, sorted.
func (t *Trace) Workloads() []string {
	ids := make([]string, 0, len(t.Duty))
	for id := range t.Duty {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Load reads a trace CSV, gzip-compressed when the name ends in .gz.
// Columns: timestamp (Unix seconds), pod, gpu_duty_cycle_percent, gpu_memory_used_bytes.
func Load(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	t, err := Read(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

type traceRow struct {
	ts        int64
	duty, mem float64
	workload  string
}

// Read parses a trace CSV with a header row.
func Read(r io.Reader) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, want := range []string{"timestamp", "pod", "gpu_duty_cycle_percent", "gpu_memory_used_bytes"} {
		if _, ok := col[want]; !ok {
			return nil, fmt.Errorf("header has no %s column", want)
		}
	}
	var rows []traceRow
	minTS, maxTS := int64(math.MaxInt64), int64(math.MinInt64)
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		ts, err := strconv.ParseInt(rec[col["timestamp"]], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: timestamp %q is not Unix seconds", line, rec[col["timestamp"]])
		}
		row := traceRow{ts: ts, workload: rec[col["pod"]], duty: math.NaN(), mem: math.NaN()}
		if s := rec[col["gpu_duty_cycle_percent"]]; s != "" {
			if row.duty, err = strconv.ParseFloat(s, 64); err != nil || row.duty < 0 || row.duty > 100 {
				return nil, fmt.Errorf("line %d: gpu_duty_cycle_percent %q is not 0-100", line, s)
			}
			row.duty /= 100
		}
		if s := rec[col["gpu_memory_used_bytes"]]; s != "" {
			if row.mem, err = strconv.ParseFloat(s, 64); err != nil || row.mem < 0 {
				return nil, fmt.Errorf("line %d: gpu_memory_used_bytes %q is not a byte count", line, s)
			}
		}
		rows = append(rows, row)
		minTS, maxTS = min(minTS, ts), max(maxTS, ts)
	}
	if len(rows) == 0 {
		return nil, errors.New("trace has no rows")
	}
	step := sampleStep(rows)
	slot := func(ts int64) int { return int((ts - minTS + step/2) / step) }
	n := slot(maxTS) + 1
	t := &Trace{Step: time.Duration(step) * time.Second, Start: time.Unix(minTS, 0).UTC(), Duty: map[string][]float64{}, Memory: map[string][]float64{}}
	for _, row := range rows {
		d, ok := t.Duty[row.workload]
		if !ok {
			d, t.Memory[row.workload] = nanSlice(n), nanSlice(n)
			t.Duty[row.workload] = d
		}
		i := slot(row.ts)
		if !math.IsNaN(d[i]) || !math.IsNaN(t.Memory[row.workload][i]) {
			return nil, fmt.Errorf("pod %s: two samples at step %d (timestamps %d s apart, sampled every %d s)", row.workload, i, row.ts-minTS, step)
		}
		d[i], t.Memory[row.workload][i] = row.duty, row.mem
	}
	return t, nil
}

// sampleStep is the gap that most often separates two consecutive
// timestamps of the trace, in seconds: the interval it was sampled at,
// which a jittered timestamp does not move. A trace of one timestamp has
// a step of a minute.
func sampleStep(rows []traceRow) int64 {
	ts := make([]int64, len(rows))
	for i, row := range rows {
		ts[i] = row.ts
	}
	slices.Sort(ts)
	gaps := map[int64]int{}
	var step int64 = 60
	for i := 1; i < len(ts); i++ {
		if g := ts[i] - ts[i-1]; g > 0 {
			gaps[g]++
			if gaps[g] > gaps[step] || (gaps[g] == gaps[step] && g < step) {
				step = g
			}
		}
	}
	return step
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}
