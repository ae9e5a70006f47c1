package nvmlsim

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/trace"
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
type traceCache map[string]*trace.Trace

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
		if tr, err = trace.Load(path); err != nil {
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
