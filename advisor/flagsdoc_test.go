package main

import (
	"context"
	"io"
	"testing"

	"github.com/gpureclaim/gpureclaim/internal/testkit/flagsdoc"
)

// Every flag is in docs/flags.md, as -h prints it.
func TestFlagsDoc(t *testing.T) {
	flagsdoc.Check(t, "gpureclaim-advisor", func(args []string, stdout, stderr io.Writer) int {
		return run(context.Background(), args, stdout, stderr)
	})
}
