package nvmlsim

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Signal is a value that follows simulated time.
type Signal interface {
	// At returns the value at simulated time t since the scenario started.
	At(t time.Duration) float64
}

// Constant is a Signal that never changes.
type Constant float64

func (c Constant) At(time.Duration) float64 { return float64(c) }

// Step is one point of a Steps signal.
type Step struct {
	At    Duration `yaml:"at"`
	Value Quantity `yaml:"value"`
}

// Steps holds each value from its time until the next step, optionally repeating.
type Steps struct {
	Points []Step   `yaml:"points"`
	Repeat Duration `yaml:"repeat"`
}

func (s *Steps) At(t time.Duration) float64 {
	if s.Repeat > 0 {
		t %= time.Duration(s.Repeat)
	}
	v := float64(s.Points[0].Value)
	for _, p := range s.Points {
		if time.Duration(p.At) > t {
			break
		}
		v = float64(p.Value)
	}
	return v
}

// Square alternates between High (for HighFor) and Low, once every Period.
type Square struct {
	High    Quantity `yaml:"high"`
	Low     Quantity `yaml:"low"`
	Period  Duration `yaml:"period"`
	HighFor Duration `yaml:"high_for"`
	Phase   Duration `yaml:"phase"`
}

func (s *Square) At(t time.Duration) float64 {
	pos := (t + time.Duration(s.Phase)) % time.Duration(s.Period)
	if pos < 0 {
		pos += time.Duration(s.Period)
	}
	if pos < time.Duration(s.HighFor) {
		return float64(s.High)
	}
	return float64(s.Low)
}

// Checkpoint is a training job: Busy, except for a Stall of Idle every Every,
// the pause while it writes a checkpoint.
type Checkpoint struct {
	Busy  Quantity `yaml:"busy"`
	Idle  Quantity `yaml:"idle"`
	Every Duration `yaml:"every"`
	Stall Duration `yaml:"stall"`
}

func (c *Checkpoint) At(t time.Duration) float64 {
	pos := t % time.Duration(c.Every)
	if pos >= time.Duration(c.Every)-time.Duration(c.Stall) {
		return float64(c.Idle)
	}
	return float64(c.Busy)
}

// Value is a scenario field that is a constant or a signal. In YAML it is a
// number ("0.9", "90%", "20GiB") or a map with exactly one of steps, square,
// checkpoint or trace.
type Value struct {
	Signal
	// node keeps the YAML position for errors found after parsing (traces).
	line, column int
	trace        *TraceRef
}

// IsSet says whether the field was given.
func (v *Value) IsSet() bool { return v != nil && v.Signal != nil }

// Max is the largest value the signal can take, where that can be known
// without evaluating it over time; NaN for traces.
func (v *Value) bounds() (lo, hi float64) {
	switch s := v.Signal.(type) {
	case Constant:
		return float64(s), float64(s)
	case *Steps:
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, p := range s.Points {
			lo, hi = math.Min(lo, float64(p.Value)), math.Max(hi, float64(p.Value))
		}
		return lo, hi
	case *Square:
		return math.Min(float64(s.High), float64(s.Low)), math.Max(float64(s.High), float64(s.Low))
	case *Checkpoint:
		return math.Min(float64(s.Busy), float64(s.Idle)), math.Max(float64(s.Busy), float64(s.Idle))
	}
	return math.NaN(), math.NaN()
}

type valueForms struct {
	Steps      *Steps      `yaml:"steps"`
	Square     *Square     `yaml:"square"`
	Checkpoint *Checkpoint `yaml:"checkpoint"`
	Trace      *TraceRef   `yaml:"trace"`
}

func (v *Value) UnmarshalYAML(n *yaml.Node) error {
	v.line, v.column = n.Line, n.Column
	if n.Kind == yaml.ScalarNode {
		var q Quantity
		if err := n.Decode(&q); err != nil {
			return err
		}
		v.Signal = Constant(q)
		return nil
	}
	var f valueForms
	if err := decodeStrict(n, &f); err != nil {
		return err
	}
	set := 0
	for _, ok := range []bool{f.Steps != nil, f.Square != nil, f.Checkpoint != nil, f.Trace != nil} {
		if ok {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("line %d: a value is a number or a map with exactly one of steps, square, checkpoint, trace", n.Line)
	}
	switch {
	case f.Steps != nil:
		if len(f.Steps.Points) == 0 {
			return fmt.Errorf("line %d: steps.points is empty", n.Line)
		}
		for i := 1; i < len(f.Steps.Points); i++ {
			if f.Steps.Points[i].At <= f.Steps.Points[i-1].At {
				return fmt.Errorf("line %d: steps.points[%d].at must be later than the point before it", n.Line, i)
			}
		}
		if f.Steps.Repeat < 0 {
			return fmt.Errorf("line %d: steps.repeat must not be negative", n.Line)
		}
		v.Signal = f.Steps
	case f.Square != nil:
		if f.Square.Period <= 0 {
			return fmt.Errorf("line %d: square.period must be positive", n.Line)
		}
		if f.Square.HighFor < 0 || f.Square.HighFor > f.Square.Period {
			return fmt.Errorf("line %d: square.high_for must be between 0 and square.period", n.Line)
		}
		v.Signal = f.Square
	case f.Checkpoint != nil:
		if f.Checkpoint.Every <= 0 {
			return fmt.Errorf("line %d: checkpoint.every must be positive", n.Line)
		}
		if f.Checkpoint.Stall < 0 || f.Checkpoint.Stall > f.Checkpoint.Every {
			return fmt.Errorf("line %d: checkpoint.stall must be between 0 and checkpoint.every", n.Line)
		}
		v.Signal = f.Checkpoint
	case f.Trace != nil:
		v.trace = f.Trace
	}
	return nil
}

// Quantity is a number that may carry a percent sign (a ratio: "90%" is 0.9)
// or a byte unit ("20GiB", "512MB").
type Quantity float64

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"B", 1},
}

// ParseQuantity reads "0.9", "90%", "20GiB" and the like.
func ParseQuantity(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a percentage", s)
		}
		return f / 100, nil
	}
	for _, u := range byteUnits {
		if p, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			if err != nil {
				return 0, fmt.Errorf("%q is not a byte size", s)
			}
			return f * u.mult, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number, a percentage or a byte size", s)
	}
	return f, nil
}

func (q *Quantity) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a number", n.Line)
	}
	f, err := ParseQuantity(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*q = Quantity(f)
	return nil
}

// Duration is a time.Duration in YAML ("10m", "1h30m", "-2h").
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (e.g. 90s, 10m, 2h)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// decodeStrict decodes n into out and refuses keys that out has no field for.
// A Decoder's KnownFields does not reach into custom unmarshalers, so the
// check is done here, keeping the line numbers of the original document.
func decodeStrict(n *yaml.Node, out any) error {
	if err := checkKnown(n, reflect.TypeOf(out)); err != nil {
		return err
	}
	return n.Decode(out)
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

func checkKnown(n *yaml.Node, t reflect.Type) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil // checks itself
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			ft, ok := fields[k.Value]
			if !ok {
				return fmt.Errorf("line %d: field %s not found in %s", k.Line, k.Value, strings.ToLower(t.Name()))
			}
			if err := checkKnown(n.Content[i+1], ft); err != nil {
				return err
			}
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			if err := checkKnown(c, t.Elem()); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if err := checkKnown(n.Content[i], t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}
