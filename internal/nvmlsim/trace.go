package nvmlsim

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TraceRef replays one workload's column of a per-minute utilization trace
// (the format of traces/genai-pods.csv.gz).
type TraceRef struct {
	File string `yaml:"file"`
	Pod  string `yaml:"pod"`
	// Column is duty_cycle (a percentage in the file, a ratio here) or memory (bytes).
	Column string `yaml:"column"`
	// Speed replays Speed trace minutes per simulated minute (default 1).
	Speed float64 `yaml:"speed"`
	// Offset starts the replay this far into the trace.
	Offset Duration `yaml:"offset"`
	// Loop starts over at the end; otherwise the last value is held.
	Loop bool `yaml:"loop"`
}

// Trace is a loaded trace file: per workload, one sample per step.
type Trace struct {
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

// LoadTrace reads a trace CSV, gzip-compressed when the name ends in .gz.
// Columns: timestamp (Unix seconds), pod, gpu_duty_cycle_percent, gpu_memory_used_bytes.
func LoadTrace(path string) (*Trace, error) {
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
	t, err := ReadTrace(r)
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

// ReadTrace parses a trace CSV with a header row.
func ReadTrace(r io.Reader) (*Trace, error) {
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
	const step = 60
	n := int((maxTS-minTS)/step) + 1
	t := &Trace{Step: step * time.Second, Start: time.Unix(minTS, 0).UTC(), Duty: map[string][]float64{}, Memory: map[string][]float64{}}
	for _, row := range rows {
		d, ok := t.Duty[row.workload]
		if !ok {
			d, t.Memory[row.workload] = nanSlice(n), nanSlice(n)
			t.Duty[row.workload] = d
		}
		i := int((row.ts - minTS) / step)
		d[i], t.Memory[row.workload][i] = row.duty, row.mem
	}
	return t, nil
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// traceSignal replays a series. A missing sample repeats the last one known
// (a scrape gap, not an idle GPU); before the first, the first known.
type traceSignal struct {
	values []float64
	step   time.Duration
	speed  float64
	offset time.Duration
	loop   bool
}

func newTraceSignal(series []float64, step time.Duration, ref *TraceRef) *traceSignal {
	filled := make([]float64, len(series))
	last := math.NaN()
	for i, v := range series {
		if !math.IsNaN(v) {
			last = v
		}
		filled[i] = last
	}
	first := 0.0
	for _, v := range filled {
		if !math.IsNaN(v) {
			first = v
			break
		}
	}
	for i, v := range filled {
		if math.IsNaN(v) {
			filled[i] = first
		}
	}
	speed := ref.Speed
	if speed == 0 {
		speed = 1
	}
	return &traceSignal{values: filled, step: step, speed: speed, offset: time.Duration(ref.Offset), loop: ref.Loop}
}

func (s *traceSignal) At(t time.Duration) float64 {
	pos := s.offset + time.Duration(float64(t)*s.speed)
	i := int(pos / s.step)
	if i < 0 {
		i = 0
	}
	if i >= len(s.values) {
		if !s.loop {
			return s.values[len(s.values)-1]
		}
		i %= len(s.values)
	}
	return s.values[i]
}

// traceCache loads each trace file once per scenario.
type traceCache map[string]*Trace

func (c traceCache) resolve(baseDir string, ref *TraceRef) (Signal, error) {
	if ref.File == "" {
		return nil, errors.New("trace.file is required")
	}
	if ref.Pod == "" {
		return nil, errors.New("trace.pod is required")
	}
	if ref.Speed < 0 {
		return nil, errors.New("trace.speed must not be negative")
	}
	path := ref.File
	if !filepath.IsAbs(path) {
		path = filepath.Join(baseDir, path)
	}
	tr, ok := c[path]
	if !ok {
		var err error
		if tr, err = LoadTrace(path); err != nil {
			return nil, fmt.Errorf("trace.file: %w", err)
		}
		c[path] = tr
	}
	var series map[string][]float64
	switch ref.Column {
	case "duty_cycle", "":
		series = tr.Duty
	case "memory":
		series = tr.Memory
	default:
		return nil, fmt.Errorf("trace.column %q: want duty_cycle or memory", ref.Column)
	}
	s, ok := series[ref.Pod]
	if !ok {
		return nil, fmt.Errorf("trace.pod %q is not in %s", ref.Pod, ref.File)
	}
	return newTraceSignal(s, tr.Step, ref), nil
}
