package internal_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// otherTools are the flags of other programs that the documentation shows
// (kubectl, helm, curl, Slurm's commands, kube-state-metrics) and of the
// repository's own generators and scripts.
var otherTools = map[string]string{
	"create-namespace": "helm install", "set": "helm install", "strict": "helm lint",
	"from-literal": "kubectl create secret", "server-side": "kubectl apply", "reuse-values": "helm upgrade",
	"data-urlencode": "curl",
	"details":        "scontrol show job", "nodelist": "sbatch", "exclusive": "srun", "pty": "srun", "comment": "sbatch", "gres": "sbatch",
	"metric-labels-allowlist": "kube-state-metrics",
	"now":                     "kubectl delete", "for": "kubectl wait", "field-selector": "kubectl get",
	"states":           "squeue",
	"http.config.file": "promtool",
	"config":           "go run ./rules/gen", "groups-per-file": "go run ./rules/gen",
	"node": "hack/exporter-rss.sh",
}

// Every --flag a page of the documentation names is a flag of one of
// gpureclaim's binaries (docs/flags.md, which the binaries' tests hold to
// their -h) or of another program it shows; docs/flags.md itself holds
// every flag of every binary.
func TestDocsNameRealFlags(t *testing.T) {
	b, err := os.ReadFile("../docs/flags.md")
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9.-]+)`).FindAllStringSubmatch(string(b), -1) {
		ours[m[1]] = true
	}
	if len(ours) < 50 {
		t.Fatalf("docs/flags.md lists %d flags: is it still in -h's format?", len(ours))
	}
	pages, _ := filepath.Glob("../docs/*.md")
	more, _ := filepath.Glob("../deploy/*/README.md")
	pages = append(append(pages, more...), "../README.md", "../METRICS.md", "../BENCHMARKS.md", "../deploy/helm/gpureclaim/README.md")
	flag := regexp.MustCompile("(?:^|[\\s`(])--([a-z][a-z0-9.-]*[a-z0-9])")
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flag.FindAllStringSubmatch(string(b), -1) {
			if !ours[m[1]] && otherTools[m[1]] == "" {
				t.Errorf("%s names --%s, a flag of no binary", p, m[1])
			}
		}
	}
}

// Every relative link of the documentation reaches a file, and a link to a
// heading (page.md#heading) reaches one of that page's headings.
func TestDocsLinksResolve(t *testing.T) {
	pages, _ := filepath.Glob("../docs/*.md")
	more, _ := filepath.Glob("../deploy/*/README.md")
	pages = append(append(pages, more...), "../README.md", "../METRICS.md", "../BENCHMARKS.md", "../deploy/helm/gpureclaim/README.md", "../traces/README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := p
			if file != "" {
				path = filepath.Join(filepath.Dir(p), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s: %v", p, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(t, path), anchor) {
				t.Errorf("%s links to %s: %s has no such heading", p, target, path)
			}
		}
	}
}

// The user's documentation says what is tested, not which test function
// does: a name moves with the code, and means nothing to a reader.
func TestDocsNameNoTestFunctions(t *testing.T) {
	pages, _ := filepath.Glob("../docs/*.md")
	more, _ := filepath.Glob("../deploy/*/README.md")
	pages = append(append(pages, more...), "../README.md", "../METRICS.md", "../deploy/helm/gpureclaim/README.md")
	testName := regexp.MustCompile(`\b(Test|Benchmark)[A-Z][A-Za-z0-9_]*`)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range testName.FindAllString(string(b), -1) {
			t.Errorf("%s names the test function %s: say what it checks instead", p, name)
		}
	}
}

// anchors are the ids GitHub gives a page's headings.
func anchors(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fence || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		id := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, h)
		out = append(out, id)
	}
	return out
}
