package cluster

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// A process that could not listen on its port is told apart from one that
// failed for another reason: only the first is worth a start on new ports.
func TestWaitSaysWhyTheProcessEnded(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		portTaken    bool
	}{
		{"port taken", `echo "listen tcp 127.0.0.1:6443: bind: address already in use"; exit 1`, true},
		{"other failure", `echo "error: unknown flag --frobnicate"; exit 1`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Cluster{Dir: t.TempDir()}
			t.Cleanup(c.Stop)
			p, err := c.start("/bin/sh", "sh", "-c", tc.script)
			if err != nil {
				t.Fatal(err)
			}
			err = wait("sh", p, func() bool { return false })
			if err == nil {
				t.Fatal("wait returned no error for a process that exited")
			}
			if got := errors.Is(err, errPortTaken); got != tc.portTaken {
				t.Errorf("errors.Is(err, errPortTaken) = %v, want %v; err: %v", got, tc.portTaken, err)
			}
			if line := strings.SplitN(tc.script, `"`, 3)[1]; !strings.Contains(err.Error(), line) {
				t.Errorf("the error does not carry the log line %q: %v", line, err)
			}
		})
	}
}

// Another server on the apiserver's port, here one that answers every
// request with 200, never passes for the apiserver this cluster started.
func TestOnlyOurAPIServerIsReady(t *testing.T) {
	etcd := tooltest.Bin(t, "etcd")
	tooltest.Bin(t, "kube-apiserver")
	c, err := Start(Options{Bin: filepath.Dir(etcd), Dir: t.TempDir()})
	t.Cleanup(c.Stop)
	if err != nil {
		t.Fatal(err)
	}
	if !get(c.ours(), c.URL+"/readyz", AdminToken) {
		t.Fatal("the cluster's own apiserver is not ready after Start")
	}
	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	impostor.Config.ErrorLog = log.New(io.Discard, "", 0) // our client refuses its certificate, as it should
	impostor.StartTLS()
	defer impostor.Close()
	if get(c.ours(), impostor.URL+"/readyz", AdminToken) {
		t.Fatal("a server with another certificate passed for the cluster's apiserver")
	}
}
