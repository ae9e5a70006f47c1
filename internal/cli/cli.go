// Package cli runs gpureclaim's offline tools (the backtest, the advisor)
// the same way: flags parsed (exit 2 on a bad one, 0 for -h), --version
// printed, the work done until SIGINT or SIGTERM (exit 1 on failure).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/prometheus/common/version"
)

// StringList is a repeatable string flag.
type StringList []string

func (l *StringList) String() string     { return strings.Join(*l, ",") }
func (l *StringList) Set(v string) error { *l = append(*l, v); return nil }

// Tool is one command-line tool.
type Tool[O any] struct {
	Name string
	// Parse reads the flags; flag.ErrHelp after -h.
	Parse func(args []string, stderr io.Writer) (O, error)
	// Version says whether --version was asked.
	Version func(O) bool
	// Do does the work.
	Do func(ctx context.Context, o O, stdout io.Writer) error
}

// Main runs the tool on the process's arguments and exits with its code.
func (t Tool[O]) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := t.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run runs the tool and returns its exit code.
func (t Tool[O]) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := t.Parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, t.Name+":", err)
		return 2
	}
	if t.Version(o) {
		fmt.Fprintln(stdout, version.Print(t.Name))
		return 0
	}
	if err := t.Do(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, t.Name+":", err)
		return 1
	}
	return 0
}

// DefaultGCPercent sets the collector's target to percent unless the
// environment's GOGC chose one: a binary whose heap is mostly long-lived
// keeps less resident collecting before it doubles.
func DefaultGCPercent(percent int) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}
