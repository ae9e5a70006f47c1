// Package hubtest is a JupyterHub API on loopback for the tests: the
// routes that start and stop single-user servers, with the status codes
// the hub's REST API documents, behind a token.
package hubtest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub"
)

// Hub is a fake hub with users whose servers run or not.
type Hub struct {
	*httptest.Server
	Token string

	mu      sync.Mutex
	running map[string]bool // "user" or "user/server"
	calls   []string
}

// New starts a hub whose API is at URL()+"/hub/api"; running lists the
// servers that run at first ("alice" or "alice/gpu").
func New(token string, running ...string) *Hub {
	h := &Hub{Token: token, running: map[string]bool{}}
	for _, r := range running {
		h.running[r] = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hub/api/users/{user}/server", func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, r.PathValue("user")) })
	mux.HandleFunc("/hub/api/users/{user}/servers/{server}", func(w http.ResponseWriter, r *http.Request) {
		h.serve(w, r, r.PathValue("user")+"/"+r.PathValue("server"))
	})
	h.Server = httptest.NewServer(mux)
	return h
}

// API is the base URL of the hub's API.
func (h *Hub) API() string { return h.URL + "/hub/api" }

// Config is the reclaimer's config of a hub at api, with a token.
func Config(api, token string) config.JupyterHub {
	hc := config.DefaultHTTPClient()
	hc.Authorization = &promconfig.Authorization{Type: "token", Credentials: promconfig.Secret(token)}
	return config.JupyterHub{URL: api, HTTP: hc, Timeout: config.Duration(5 * time.Second)}
}

// Client is a client of this hub with a token.
func (h *Hub) Client(t testing.TB, token string) *jupyterhub.Client {
	t.Helper()
	c, err := jupyterhub.New(Config(h.API(), token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Running says whether a server runs.
func (h *Hub) Running(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running[key]
}

// Calls lists the calls made, as "DELETE alice".
func (h *Hub) Calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

func (h *Hub) serve(w http.ResponseWriter, r *http.Request, key string) {
	if r.Header.Get("Authorization") != "token "+h.Token {
		http.Error(w, `{"status": 403, "message": "Forbidden"}`, http.StatusForbidden)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, r.Method+" "+key)
	user, _, _ := strings.Cut(key, "/")
	if user == "nobody" {
		http.Error(w, `{"status": 404, "message": "Not Found"}`, http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodDelete:
		if !h.running[key] {
			http.Error(w, `{"status": 400, "message": "Server is not running"}`, http.StatusBadRequest)
			return
		}
		h.running[key] = false
		w.WriteHeader(http.StatusNoContent)
	case http.MethodPost:
		if h.running[key] {
			http.Error(w, `{"status": 400, "message": "`+key+` is already running"}`, http.StatusBadRequest)
			return
		}
		h.running[key] = true
		w.WriteHeader(http.StatusCreated)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}
