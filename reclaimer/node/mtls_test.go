package node_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// The reclaimer reaches a real exporter whose action endpoint is served
// over TLS and asks for a client certificate (--web.config.file): the
// nodes section gives the private CA, the reclaimer's certificate and the
// token. Without the certificate the exporter refuses the connection.
func TestActionEndpointOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	bin := tooltest.Build(t, dir, "./exporter/simulated", "gpureclaim-exporter-sim")
	ca := tlstest.NewCA(t, "gpu nodes CA")
	serving, reclaimer := ca.Server(t), ca.Client(t, "gpureclaim-reclaimer")
	files := map[string]string{
		"web.yml": fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n",
			serving.CertFile, serving.KeyFile, ca.CAFile),
		"node.token": "node-token\n",
		"node.yaml": "node: n1\nsystem: dgxh100\nusers: {bob: 1000}\ngpus:\n" +
			"  - {index: 0, sm_active: 0, processes: [{pid: 5000, user: bob, memory_used: 10GiB, started: -2h}]}\n",
	}
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	addr := tooltest.FreeAddr(t)
	log, err := os.Create(filepath.Join(dir, "exporter.log"))
	require.NoError(t, err)
	exporter := exec.Command(bin, "--simulate="+filepath.Join(dir, "node.yaml"), "--web.listen-address="+addr, "--web.config.file="+filepath.Join(dir, "web.yml"),
		"--sample.interval=1s", "--action.token-file="+filepath.Join(dir, "node.token"))
	exporter.Stdout, exporter.Stderr = log, log
	require.NoError(t, exporter.Start())
	t.Cleanup(func() {
		_ = exporter.Process.Kill()
		_ = exporter.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("exporter log:\n%s", b)
		}
	})

	hc := withToken(t, config.DefaultHTTPClient(), "node-token")
	hc.TLSConfig.CAFile, hc.TLSConfig.CertFile, hc.TLSConfig.KeyFile = ca.CAFile, reclaimer.CertFile, reclaimer.KeyFile
	// The unit's uuid, from the exporter's own metrics over the same
	// client: the server answering is the exporter started here.
	scrape, err := config.NewHTTPClient(hc, "scrape", 5*time.Second)
	require.NoError(t, err)
	unitInfo := regexp.MustCompile(`gpureclaim_unit_info\{[^}]*gpu_index="0"[^}]*uuid="([^"]+)"`)
	var uuid string
	require.Eventually(t, func() bool {
		resp, err := scrape.Get("https://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := unitInfo.FindSubmatch(b)
		if m != nil {
			uuid = string(m[1])
		}
		return m != nil
	}, 30*time.Second, 100*time.Millisecond)

	target := reclaim.Target{Node: "n1", UUID: uuid, User: "bob"}
	pids, err := client(t, "https://"+addr, hc).PIDs(context.Background(), target)
	require.NoError(t, err)
	require.Equal(t, []int{5000}, pids)

	noCert := hc
	noCert.TLSConfig.CertFile, noCert.TLSConfig.KeyFile = "", ""
	_, err = client(t, "https://"+addr, noCert).PIDs(context.Background(), target)
	require.Error(t, err, "the exporter asks for a client certificate")
}
