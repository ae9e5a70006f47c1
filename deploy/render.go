// Package deploy renders the Helm chart in deploy/helm/gpureclaim into the
// plain manifests of deploy/manifests, for kubectl users.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Namespace is where the plain manifests install.
const Namespace = "gpureclaim"

// KubeVersion is the Kubernetes version the chart is rendered for; helm
// built from source assumes v1.20 otherwise, which the chart refuses.
const KubeVersion = "v1.37.2"

// Files of deploy/manifests: the objects every cluster takes, and those
// that need prometheus-operator's CRDs.
const (
	CoreFile     = "gpureclaim.yaml"
	OperatorFile = "prometheus-operator.yaml"
)

// Template runs `helm template` on the chart with extra values files.
func Template(helm, chart string, values ...string) ([]byte, error) {
	args := []string{"template", "gpureclaim", chart, "--namespace", Namespace, "--kube-version", KubeVersion, "--include-crds"}
	for _, v := range values {
		args = append(args, "--values", v)
	}
	cmd := Helm(helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %v: %s", err, stderr.String())
	}
	return out, nil
}

// Helm is a helm command whose cache and config stay out of the user's home.
func Helm(helm string, args ...string) *exec.Cmd {
	cmd := exec.Command(helm, args...)
	dir := filepath.Join(os.TempDir(), "gpureclaim-helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	return cmd
}

// Docs splits a multi-document YAML stream into its non-empty documents.
func Docs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(b, []byte("\n---")) {
		d = bytes.TrimPrefix(bytes.TrimSpace(d), []byte("---"))
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			out = append(out, append(bytes.TrimSpace(d), '\n'))
		}
	}
	return out
}

func stripComments(d []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(d), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// TypeMeta is what a document says it is.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// Meta reads a document's kind and name.
func Meta(doc []byte) (TypeMeta, error) {
	var m TypeMeta
	err := yaml.Unmarshal(doc, &m)
	return m, err
}

const header = `# Rendered from deploy/helm/gpureclaim with its default values by
# "make manifests"; do not edit. %s
`

// namespaceDoc is the namespace the manifests install into. The exporter
// reads the host's /proc (hostPID) and the kubelet's socket (hostPath),
// which only the privileged Pod Security level allows.
var namespaceDoc = `apiVersion: v1
kind: Namespace
metadata:
  name: ` + Namespace + `
  labels:
    pod-security.kubernetes.io/enforce: privileged
`

// Manifests renders the chart with its defaults into deploy/manifests' files.
func Manifests(helm, chart string) (map[string][]byte, error) {
	out, err := Template(helm, chart)
	if err != nil {
		return nil, err
	}
	var core, operator bytes.Buffer
	fmt.Fprintf(&core, header, "Apply this file first:\n#   kubectl apply -f "+CoreFile)
	fmt.Fprintf(&operator, header, "Needs prometheus-operator's CRDs:\n#   kubectl apply -f "+OperatorFile)
	core.WriteString("---\n" + namespaceDoc)
	for _, d := range Docs(out) {
		m, err := Meta(d)
		if err != nil {
			return nil, err
		}
		w := &core
		if strings.HasPrefix(m.APIVersion, "monitoring.coreos.com/") {
			w = &operator
		}
		w.WriteString("---\n")
		w.Write(d)
	}
	return map[string][]byte{CoreFile: core.Bytes(), OperatorFile: operator.Bytes()}, nil
}

// Find returns the first document of a manifest file of the given kind and name.
func Find(path, kind, name string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for _, d := range Docs(b) {
		m, err := Meta(d)
		if err != nil {
			return nil, err
		}
		if m.Kind == kind && m.Metadata.Name == name {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%s: no %s %s", path, kind, name)
}

// ReclaimerClusterRole is the reclaimer's ClusterRole as the plain
// manifests ship it, for tests and the demo to bind.
func ReclaimerClusterRole(root string) ([]byte, error) {
	return Find(filepath.Join(root, "deploy", "manifests", CoreFile), "ClusterRole", "gpureclaim-reclaimer")
}

// ReclaimerRole is the reclaimer's Role in its own namespace (the Lease,
// its GPUReclaims, the replay ConfigMap) as the plain manifests ship it.
func ReclaimerRole(root string) ([]byte, error) {
	return Find(filepath.Join(root, "deploy", "manifests", CoreFile), "Role", "gpureclaim-reclaimer")
}

// ReclaimerFence is the chart's ValidatingAdmissionPolicy that refuses a
// GPUReclaim written with an old term of the Lease, and its binding, as the
// plain manifests ship them.
func ReclaimerFence(root string) ([]byte, error) {
	var out []byte
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		d, err := Find(filepath.Join(root, "deploy", "manifests", CoreFile), kind, "gpureclaim-reclaimer-fence")
		if err != nil {
			return nil, err
		}
		out = append(append(out, d...), "---\n"...)
	}
	return out, nil
}

// CRDs is the folder of the chart's CustomResourceDefinitions.
func CRDs(root string) string { return filepath.Join(root, "deploy", "helm", "gpureclaim", "crds") }
