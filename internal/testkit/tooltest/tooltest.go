// Package tooltest finds the pinned tools (promtool, prometheus, ...) that
// `make tools` builds into bin/. Under `make test` a missing tool fails the
// test; a bare `go test` skips it with a hint.
package tooltest

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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
	skipShort(t, name)
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

// skipShort skips a test that runs a real tool under go test -short: the
// quick loop runs no server and no tool.
func skipShort(t testing.TB, name string) {
	if testing.Short() {
		t.Skipf("runs %s: not under -short", name)
	}
}

// System returns the path of a program the Makefile installs with the
// machine's package manager (chromium).
func System(t testing.TB, name string) string {
	t.Helper()
	skipShort(t, name)
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("GPURECLAIM_REQUIRE_TOOLS") != "" {
		t.Fatalf("%s is not installed: run `make tools`", name)
	}
	t.Skipf("%s is not installed: run `make tools` (make test does)", name)
	return ""
}

// Served is a tool serving on loopback for one test.
type Served struct {
	URL string
	// Dir is the tool's own folder; its output is in NAME.log there.
	Dir string
	Cmd *exec.Cmd
}

// Serve runs a pinned tool on a free loopback port with the arguments
// args gives for that address and a fresh folder, and waits until
// readyPath answers 200. The tool is killed if the test's process dies and
// stopped (SIGTERM) when the test ends.
func Serve(t testing.TB, name, readyPath string, args func(addr, dir string) []string) *Served {
	t.Helper()
	bin := Bin(t, name)
	dir := t.TempDir()
	addr := FreeAddr(t)
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args(addr, dir)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Served{URL: "http://" + addr, Dir: dir, Cmd: cmd}
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + readyPath)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
			t.Fatalf("%s did not start: %s", name, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreeAddr is a loopback address nobody listens on, for a server the test
// starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Stop stops the tool (SIGTERM) and waits for it; once is enough.
func (s *Served) Stop() {
	if s.Cmd == nil {
		return
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	_ = s.Cmd.Wait()
	s.Cmd = nil
}
