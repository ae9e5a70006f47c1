// Package mailtest runs a real SMTP server for the tests: mailpit
// (bin/mailpit, built by `make tools`), on loopback, with a TLS certificate
// of its own CA, and reads what it received through its API.
package mailtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// TLS is how the server takes mail.
type TLS int

const (
	STARTTLS TLS = iota // STARTTLS required
	Implicit            // TLS from the first byte
	Plain               // no TLS offered
)

// Server is a running mailpit.
type Server struct {
	SMTP string // host:port
	API  string // http://host:port
	CA   []byte // PEM of the CA that signed its certificate
	dir  string
}

// Start runs mailpit; it is stopped when the test ends. It accepts any
// user and password.
func Start(t testing.TB, mode TLS) *Server {
	t.Helper()
	bin := tooltest.Bin(t, "mailpit")
	dir := t.TempDir()
	s := &Server{SMTP: tooltest.FreeAddr(t), dir: dir}
	api := tooltest.FreeAddr(t)
	s.API = "http://" + api
	args := []string{"--listen", api, "--smtp", s.SMTP, "--database", filepath.Join(dir, "mail.db"), "--smtp-auth-accept-any", "--smtp-disable-rdns"}
	if mode == Plain {
		args = append(args, "--smtp-auth-allow-insecure") // it would not start, else: the client must refuse
	} else {
		ca := tlstest.NewCA(t, "mailtest CA")
		cert := ca.Server(t)
		var err error
		if s.CA, err = os.ReadFile(ca.CAFile); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--smtp-tls-cert", cert.CertFile, "--smtp-tls-key", cert.KeyFile)
		if mode == Implicit {
			args = append(args, "--smtp-require-tls")
		} else {
			args = append(args, "--smtp-require-starttls")
		}
	}
	log, err := os.Create(filepath.Join(dir, "mailpit.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		var info struct {
			Version string `json:"Version"`
		}
		if err := s.get("/api/v1/info", &info); err == nil && info.Version != "" {
			return s // the server answering is mailpit, and it is ours: its port was free
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "mailpit.log"))
			t.Fatalf("mailpit did not start: %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Message is a received message as mailpit's API gives it.
type Message struct {
	ID        string `json:"ID"`
	MessageID string `json:"MessageID"`
	Subject   string `json:"Subject"`
	From      struct {
		Address string `json:"Address"`
	} `json:"From"`
	To []struct {
		Address string `json:"Address"`
	} `json:"To"`
	Bcc []struct {
		Address string `json:"Address"`
	} `json:"Bcc"`
	Text string `json:"Text"`
	HTML string `json:"HTML"`
}

// Messages returns what the server received, newest first, in full.
func (s *Server) Messages(t testing.TB) []Message {
	t.Helper()
	var list struct {
		Messages []struct {
			ID string `json:"ID"`
		} `json:"messages"`
	}
	if err := s.get("/api/v1/messages", &list); err != nil {
		t.Fatal(err)
	}
	out := make([]Message, 0, len(list.Messages))
	for _, m := range list.Messages {
		var full Message
		if err := s.get("/api/v1/message/"+m.ID, &full); err != nil {
			t.Fatal(err)
		}
		out = append(out, full)
	}
	return out
}

func (s *Server) get(path string, out any) error {
	resp, err := http.Get(s.API + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
