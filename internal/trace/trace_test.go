package trace

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// csvOf writes rows of (seconds from a start, duty percent) for pod p.
func csvOf(offsets []int64, duty func(i int) int) string {
	var b strings.Builder
	b.WriteString("timestamp,pod,gpu_duty_cycle_percent,gpu_memory_used_bytes\n")
	for i, o := range offsets {
		b.WriteString(strings.Join([]string{itoa(1662858720 + o), "p", itoa(int64(duty(i))), "1024"}, ","))
		b.WriteString("\n")
	}
	return b.String()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Every sample keeps a step of its own, whatever the interval the trace
// was taken at: on a 60 s grid, a trace taken every 57 s lost one sample
// in twenty.
func TestEverySampleIsKept(t *testing.T) {
	for _, tc := range []struct {
		name     string
		offsets  func(i int) int64
		wantStep time.Duration
	}{
		{"every 57 s", func(i int) int64 { return int64(i) * 57 }, 57 * time.Second},
		{"every minute", func(i int) int64 { return int64(i) * 60 }, time.Minute},
		{"every 57 s, every fifth a second late", func(i int) int64 {
			if i%5 == 4 {
				return int64(i)*57 + 1
			}
			return int64(i) * 57
		}, 57 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var offsets []int64
			for i := range 100 {
				offsets = append(offsets, tc.offsets(i))
			}
			tr, err := Read(strings.NewReader(csvOf(offsets, func(i int) int { return i })))
			require.NoError(t, err)
			require.Equal(t, tc.wantStep, tr.Step)
			d := tr.Duty["p"]
			require.Len(t, d, 100)
			for i, v := range d {
				require.False(t, math.IsNaN(v), "step %d has its sample", i)
				require.InDelta(t, float64(i)/100, v, 1e-9, "step %d is sample %d", i, i)
			}
		})
	}
}

// Two samples of a pod that fall on one step are an error, not one lost.
func TestTwoSamplesInOneStepAreRefused(t *testing.T) {
	_, err := Read(strings.NewReader(csvOf([]int64{0, 57, 114, 120, 171}, func(int) int { return 1 })))
	require.ErrorContains(t, err, "pod p: two samples at step 2")
}
