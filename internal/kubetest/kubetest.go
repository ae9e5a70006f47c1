// Package kubetest runs a real kube-apiserver on etcd, on loopback, for the
// tests: the binaries `make tools` builds into bin/, free ports, token
// authentication (admintoken is cluster-admin; reclaimertoken has only what
// RBAC grants it) and, when asked, kube-controller-manager, kube-scheduler
// and kwok for fake nodes that run pods.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpureclaim/gpureclaim/internal/tooltest"
)

// Tokens of the two users.
const (
	AdminToken     = "admintoken"
	ReclaimerToken = "reclaimertoken"
	ReclaimerUser  = "reclaimer"
)

// Cluster is a running control plane.
type Cluster struct {
	Dir        string
	URL        string
	Kubeconfig string
	procs      []*exec.Cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs etcd and kube-apiserver; with full, also the controller
// manager, the scheduler and kwok (stages from kwokStages, a file).
func Start(t testing.TB, full bool, kwokStages string) *Cluster {
	t.Helper()
	bin := func(name string) string { return tooltest.Bin(t, name) }
	etcd, apiserver := bin("etcd"), bin("kube-apiserver")
	dir := t.TempDir()
	c := &Cluster{Dir: dir}
	t.Cleanup(c.Stop)

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(AdminToken+",admin,admin-uid,system:masters\n"+ReclaimerToken+","+ReclaimerUser+",reclaimer-uid\n"), 0o600))

	clientPort, err := freePort()
	must(t, err)
	peerPort, err := freePort()
	must(t, err)
	apiPort, err := freePort()
	must(t, err)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	c.start(t, "etcd", etcd, "--data-dir="+filepath.Join(dir, "etcd"), "--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peerPort), fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peerPort),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", peerPort), "--unsafe-no-fsync", "--log-level=warn")
	wait(t, "etcd", func() bool {
		resp, err := http.Get(etcdURL + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})

	args := []string{"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort), "--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"), "--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"), "--authorization-mode=RBAC", "--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none"}
	if !full {
		// Without the controller manager no default ServiceAccount exists.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	c.start(t, "kube-apiserver", apiserver, args...)
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	wait(t, "kube-apiserver", func() bool {
		req, _ := http.NewRequest(http.MethodGet, c.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		resp, err := insecure.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	must(t, os.WriteFile(c.Kubeconfig, []byte(c.kubeconfig(AdminToken)), 0o600))
	if full {
		c.startControllers(t, kwokStages)
	}
	return c
}

func (c *Cluster) kubeconfig(token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: user, user: {token: %s}}]
contexts: [{name: local, context: {cluster: local, user: user}}]
current-context: local
`, c.URL, token)
}

// KubeconfigFor writes a kubeconfig that authenticates with token.
func (c *Cluster) KubeconfigFor(t testing.TB, token string) string {
	p := filepath.Join(c.Dir, "kubeconfig-"+token)
	must(t, os.WriteFile(p, []byte(c.kubeconfig(token)), 0o600))
	return p
}

// Client returns a clientset that authenticates with token.
func (c *Cluster) Client(t testing.TB, token string) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: c.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 100, Burst: 200})
	must(t, err)
	return cs
}

func (c *Cluster) startControllers(t testing.TB, stages string) {
	kcm, sched, kwok := tooltest.Bin(t, "kube-controller-manager"), tooltest.Bin(t, "kube-scheduler"), tooltest.Bin(t, "kwok")
	c.start(t, "kube-controller-manager", kcm, "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file="+filepath.Join(c.Dir, "sa.key"), "--controllers=*", "--use-service-account-credentials=false")
	c.start(t, "kube-scheduler", sched, "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0")
	kwokPort, err := freePort()
	must(t, err)
	c.start(t, "kwok", kwok, "--kubeconfig="+c.Kubeconfig, "--config="+stages, "--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-ip=10.0.0.1", fmt.Sprintf("--server-address=127.0.0.1:%d", kwokPort))
	cs := c.Client(t, AdminToken)
	wait(t, "the default ServiceAccount", func() bool {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1GetOptions)
		return err == nil
	})
}

func (c *Cluster) start(t testing.TB, name, bin string, args ...string) {
	log, err := os.Create(filepath.Join(c.Dir, name+".log"))
	must(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	c.procs = append(c.procs, cmd)
}

// Stop ends every process, newest first.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	c.procs = nil
}

// Log returns a component's log, for failures.
func (c *Cluster) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, name+".log"))
	return string(b)
}

func wait(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up in 90s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var metav1GetOptions = metav1.GetOptions{}
