// Package tooltest finds the pinned tools (promtool, prometheus, ...) that
// `make tools` builds into bin/. Under `make test` a missing tool fails the
// test; a bare `go test` skips it with a hint.
package tooltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Root is the repository root (the folder with go.mod).
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// Build compiles a command of this module (e.g. ./exporter) into dir.
func Build(t testing.TB, dir, pkg, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = Root(t)
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}

// Bin returns the path of a tool built by `make tools`.
func Bin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Root(t), "bin", name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if p, err := exec.LookPath(name); err == nil && os.Getenv("GPURECLAIM_REQUIRE_TOOLS") == "" {
		return p
	}
	if os.Getenv("GPURECLAIM_REQUIRE_TOOLS") != "" {
		t.Fatalf("%s is not in bin/: run `make tools`", name)
	}
	t.Skipf("%s is not in bin/: run `make tools` (make test does)", name)
	return ""
}

// System returns the path of a program the Makefile installs with the
// machine's package manager (chromium).
func System(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("GPURECLAIM_REQUIRE_TOOLS") != "" {
		t.Fatalf("%s is not installed: run `make tools`", name)
	}
	t.Skipf("%s is not installed: run `make tools` (make test does)", name)
	return ""
}
