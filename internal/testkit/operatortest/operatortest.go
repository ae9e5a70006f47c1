// Package operatortest runs the workload controllers the reclaimer stops —
// KubeRay, the Kubeflow training-operator and Kueue, as `make tools` builds
// them from the Go module proxy — as plain processes against a test
// control plane, with every CRD they watch installed.
package operatortest

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/internal/sim/cluster"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// Versions the Makefile builds (KUBERAY_VERSION, TRAINING_OPERATOR_VERSION,
// KUEUE_VERSION), for test names and reports.
const (
	KubeRay          = "KubeRay 1.5.0"
	TrainingOperator = "training-operator 1.8.1"
	Kueue            = "Kueue 0.17.0"
)

// Certificate paths the controllers read and that their flags cannot move.
const (
	trainingOperatorCerts = "/tmp/k8s-webhook-server/serving-certs"
	kueueMetricsCerts     = "/etc/kueue/metrics/certs"
)

// Start installs the controllers' CRDs and runs the three controllers
// until the test ends. Kueue manages batch Jobs, RayJobs and PyTorchJobs
// that carry kueue.x-k8s.io/queue-name.
func Start(t testing.TB, cl *kubetest.Cluster) {
	t.Helper()
	cl.InstallCRDs(t, tooltest.Bin(t, "operator-crds"))
	dir := t.TempDir()
	kubeconfig := []string{"KUBECONFIG=" + cl.Kubeconfig}

	probe := port(t)
	run(t, dir, "ray-operator", kubeconfig, "--metrics-addr="+addr(port(t)), "--health-probe-bind-address="+addr(probe), "--enable-leader-election=false")
	ready(t, "ray-operator", dir, fmt.Sprintf("http://%s/readyz", addr(probe)))

	admin := cl.Client(t, kubetest.AdminToken)
	if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubeflow"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets("kubeflow").Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "training-operator-webhook-cert"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	serving(t, trainingOperatorCerts, "training-operator.kubeflow.svc")
	probe = port(t)
	run(t, dir, "training-operator.v1", kubeconfig, "--metrics-bind-address="+addr(port(t)), "--health-probe-bind-address="+addr(probe),
		fmt.Sprintf("--webhook-server-port=%d", port(t)), "--enable-scheme=pytorchjob")
	ready(t, "training-operator.v1", dir, fmt.Sprintf("http://%s/readyz", addr(probe)))

	serving(t, kueueMetricsCerts, "kueue-controller-manager-metrics-service.kueue-system.svc")
	webhookCerts := filepath.Join(dir, "kueue-webhook")
	serving(t, webhookCerts, "127.0.0.1")
	probe = port(t)
	cfg := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
internalCertManagement: {enable: false}
leaderElection: {leaderElect: false}
health: {healthProbeBindAddress: %q}
metrics: {bindAddress: %q}
webhook: {host: 127.0.0.1, port: %d, certDir: %q}
integrations:
  frameworks: [batch/job, ray.io/rayjob, kubeflow.org/pytorchjob]
`, addr(probe), addr(port(t)), port(t), webhookCerts)
	cfgFile := filepath.Join(dir, "kueue.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "kueue", kubeconfig, "--config="+cfgFile, "--feature-gates=VisibilityOnDemand=false", fmt.Sprintf("--visibility-server-port=%d", port(t)))
	ready(t, "kueue", dir, fmt.Sprintf("http://%s/readyz", addr(probe)))
}

func port(t testing.TB) int {
	p, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// run starts a controller; its log is in dir and shown if the test fails.
func run(t testing.TB, dir, name string, env []string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tooltest.Bin(t, name), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		cluster.Stop(cmd, 10*time.Second)
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("%s's log ends:\n%s", name, b)
		}
	})
}

// ready waits until a controller's readiness probe answers 200.
func ready(t testing.TB, name, dir, url string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
			t.Fatalf("%s is not ready after 2 minutes (%v):\n%s", name, err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serving writes tls.crt and tls.key for a name into dir.
func serving(t testing.TB, dir, name string) {
	t.Helper()
	p := tlstest.NewCA(t, name+" CA").Server(t, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{p.CertFile: "tls.crt", p.KeyFile: "tls.key"} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
