// Package flagsdoc checks docs/flags.md against each binary's -h in tests:
// every flag documented, with its default, and nothing that is gone.
package flagsdoc

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

var update = flag.Bool("update-flags", false, "rewrite the binary's section of docs/flags.md from its -h")

// Doc is the flags reference, from the repository's root.
const Doc = "docs/flags.md"

// Check runs the binary's main with -h and requires its section of
// docs/flags.md ("## `binary`", then a text block) to be that output.
func Check(t *testing.T, binary string, run func(args []string, stdout, stderr io.Writer) int) {
	t.Helper()
	t.Setenv("NODE_NAME", "") // a default read from the environment, as in a clean shell
	var out bytes.Buffer
	run([]string{"-h"}, &out, &out)
	usage := strings.TrimRight(out.String(), "\n") + "\n"
	path := filepath.Join(tooltest.Root(t), Doc)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	heading := "## `" + binary + "`\n"
	start := strings.Index(doc, heading)
	if start < 0 {
		t.Fatalf("%s has no section %q: add it, then run go test -run %s -update-flags", Doc, strings.TrimSpace(heading), t.Name())
	}
	open := strings.Index(doc[start:], "```text\n")
	if open < 0 {
		t.Fatalf("%s: section %q has no ```text block", Doc, strings.TrimSpace(heading))
	}
	open += start + len("```text\n")
	end := strings.Index(doc[open:], "```\n")
	if end < 0 {
		t.Fatalf("%s: the ```text block of %q is not closed", Doc, strings.TrimSpace(heading))
	}
	end += open
	if doc[open:end] == usage {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc[:open]+usage+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's flags differ from %s (run go test -run %s -update-flags and review the diff):\n%s", binary, Doc, t.Name(), diff(doc[open:end], usage))
}

// diff lists the lines only in one of a and b.
func diff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out strings.Builder
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			fmt.Fprintf(&out, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			fmt.Fprintf(&out, "+ %s\n", l)
		}
	}
	return out.String()
}
