// Package logging builds the commands' loggers from their --log.level and
// --log.format flags, in the Prometheus ecosystem's format.
package logging

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/common/promslog"
)

// New returns a logger writing to w; an error names the flag that is wrong.
func New(level, format string, w io.Writer) (*slog.Logger, error) {
	lvl, f := promslog.NewLevel(), promslog.NewFormat()
	if err := lvl.Set(level); err != nil {
		return nil, fmt.Errorf("--log.level: %w", err)
	}
	if err := f.Set(format); err != nil {
		return nil, fmt.Errorf("--log.format: %w", err)
	}
	return promslog.New(&promslog.Config{Level: lvl, Format: f, Writer: w}), nil
}
