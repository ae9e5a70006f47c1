package deploy_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	rconfig "github.com/gpureclaim/gpureclaim/reclaimer/config"
)

// unit is the part of a systemd unit the tests read.
type unit struct {
	execStart   []string // ExecStart, split into words
	credentials []string // LoadCredential names
}

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var u unit
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		switch {
		case !ok:
		case k == "ExecStart":
			u.execStart = strings.Fields(v)
		case k == "LoadCredential":
			name, _, _ := strings.Cut(v, ":")
			u.credentials = append(u.credentials, name)
		}
	}
	return u
}

// readEnv reads an EnvironmentFile.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			env[k] = v
		}
	}
	return env
}

var envRef = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// expand does what systemd does to ExecStart: ${X} within a word, and $X
// alone as a word splits into words (none when empty).
func expand(words []string, env map[string]string) []string {
	var out []string
	for _, w := range words {
		if m := envRef.FindStringSubmatch(w); m != nil && m[0] == w && m[2] != "" {
			out = append(out, strings.Fields(env[m[2]])...)
			continue
		}
		out = append(out, envRef.ReplaceAllStringFunc(w, func(r string) string {
			return env[strings.Trim(r, "${}")]
		}))
	}
	return out
}

// The units pass systemd-analyze verify with no warning, and what their
// ExecStart becomes with the shipped environment file is accepted by the
// binaries.
func TestSystemdUnits(t *testing.T) {
	analyze := tooltest.System(t, "systemd-analyze")
	root := tooltest.Root(t)
	dir := filepath.Join(root, "deploy", "systemd")
	exporter, reclaimer := binaries(t)
	bins := map[string]string{"gpureclaim-exporter": exporter, "gpureclaim-reclaimer": reclaimer}
	creds := t.TempDir()
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(dir, name+".service"))
			require.NoError(t, err)
			// verify checks that the binaries exist: point it at the built ones.
			units := t.TempDir()
			file := filepath.Join(units, name+".service")
			require.NoError(t, os.WriteFile(file, bytes.ReplaceAll(src, []byte("/usr/local/bin/"), []byte(filepath.Dir(bin)+"/")), 0o644))
			out, err := exec.Command(analyze, "verify", file).CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warns")

			u := readUnit(t, filepath.Join(dir, name+".service"))
			env := readEnv(t, filepath.Join(dir, name+".env"))
			env["CREDENTIALS_DIRECTORY"] = creds
			env["STATE_DIRECTORY"] = t.TempDir()
			args := expand(u.execStart, env)
			require.Equal(t, "/usr/local/bin/"+name, args[0])
			out, err = exec.Command(bin, append(args[1:], "--version")...).CombinedOutput()
			require.NoError(t, err, "%v: %s", args, out)
		})
	}

	// The bare-metal reclaimer config loads, reading its secrets where the
	// unit's credentials land.
	u := readUnit(t, filepath.Join(dir, "gpureclaim-reclaimer.service"))
	for _, c := range u.credentials {
		require.NoError(t, os.WriteFile(filepath.Join(creds, c), []byte("t0ken\n"), 0o600))
	}
	b, err := os.ReadFile(filepath.Join(dir, "reclaimer.yml"))
	require.NoError(t, err)
	c, err := rconfig.Parse(bytes.ReplaceAll(b, []byte("/run/credentials/gpureclaim-reclaimer.service"), []byte(creds)), dir)
	require.NoError(t, err)
	require.Equal(t, "t0ken", c.Webhook.BearerToken)
	require.Equal(t, filepath.Join(creds, "node-token"), c.Nodes.HTTP.Authorization.CredentialsFile)
	require.Empty(t, c.Warnings, "the unit's config writes no deprecated key")
	require.False(t, c.Kubernetes.On())
	require.True(t, c.DryRun, "a fresh install acts on nothing")
	require.Contains(t, readUnit(t, filepath.Join(dir, "gpureclaim-exporter.service")).credentials, "node-token")
}
