package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeclock"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
	"github.com/gpureclaim/gpureclaim/reclaimer/web"
)

// brokenStore refuses every write until healed.
type brokenStore struct {
	reclaim.Store
	healed *atomic.Bool
}

func (b brokenStore) Write(rs []*reclaim.Reclaim, evs []reclaim.Event) error {
	if !b.healed.Load() {
		return errors.New("disk full")
	}
	return b.Store.Write(rs, evs)
}

type server struct {
	*httptest.Server
	engine *lifecycle.Engine
	clock  *fakeclock.Clock
	store  reclaim.Store
	healed atomic.Bool
}

func newServer(t *testing.T, broken bool) *server {
	cfg := reclaimtest.Config(t, "webhook: {bearer_token_file: token, basic_auth: {username: am, password_file: token}, max_body_bytes: 4KiB}\n")
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	s := &server{store: st}
	var use reclaim.Store = st
	var journal reclaim.Journal = st
	if broken {
		use, journal = brokenStore{st, &s.healed}, nil // no journal: every write answers for itself
	}
	s.clock = reclaimtest.NewClock()
	reg := prometheus.NewRegistry()
	s.engine, err = lifecycle.New(lifecycle.Options{Config: cfg, Store: use, Journal: journal, Actor: &reclaimtest.Actor{}, Clock: s.clock.Now, Metrics: lifecycle.NewMetrics(reg)})
	require.NoError(t, err)
	s.Server = httptest.NewServer(web.New(web.Options{Config: cfg, Engine: s.engine, Logger: nil, Clock: s.clock.Now, Registry: reg}))
	t.Cleanup(s.Close)
	return s
}

func payload(t *testing.T) []byte {
	b, err := os.ReadFile("testdata/firing.json")
	require.NoError(t, err)
	return b
}

func (s *server) post(t *testing.T, body []byte, auth func(*http.Request)) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != nil {
		auth(req)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	var p struct{ Error string }
	if json.Unmarshal(b.Bytes(), &p) == nil && p.Error != "" {
		return resp.StatusCode, p.Error
	}
	return resp.StatusCode, b.String()
}

func bearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

func basic(u, p string) func(*http.Request) {
	return func(r *http.Request) { r.SetBasicAuth(u, p) }
}

func TestWebhookAcceptsAnAlertmanagerNotification(t *testing.T) {
	s := newServer(t, false)
	code, body := s.post(t, payload(t), bearer("t0ken"))
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"New":1,"Duplicate":0,"Cancelled":0,"Ignored":0,"Journaled":0}`, body)
	rs := s.engine.List()
	require.Len(t, rs, 1)
	require.Equal(t, "5e8f0a8f0c0b2a11-1772445600", rs[0].ID)
	require.Equal(t, "data-science/notebook-carol", rs[0].Target.Holder())

	code, _ = s.post(t, payload(t), basic("am", "t0ken"))
	require.Equal(t, http.StatusOK, code, "basic auth too; a duplicate is fine")
	require.Len(t, s.engine.List(), 1)
}

func TestWebhookBadInputChangesNothing(t *testing.T) {
	good := payload(t)
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(good, &m))
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	for _, tc := range []struct {
		name string
		body []byte
		auth func(*http.Request)
		code int
		want string
	}{
		{"no credentials", good, nil, 401, "a valid bearer token or basic auth is required"},
		{"wrong token", good, bearer("guess"), 401, ""},
		{"wrong password", good, basic("am", "guess"), 401, ""},
		{"not JSON", []byte("alerts!"), bearer("t0ken"), 400, "not an Alertmanager notification"},
		{"truncated", good[:100], bearer("t0ken"), 400, "not an Alertmanager notification"},
		{"trailing data", append(append([]byte{}, good...), []byte("{}")...), bearer("t0ken"), 400, "after top-level value"},
		// A label named twice could say one thing to a matcher and another
		// to the record.
		{"a label named twice", bytes.Replace(good, []byte(`"alertname": "GPUIdle"`), []byte(`"alertname": "GPUIdle", "alertname": "Other"`), 1), bearer("t0ken"), 400, "duplicate object member name"},
		{"a label value not a string", bytes.Replace(good, []byte(`"alertname": "GPUIdle"`), []byte(`"alertname": ["GPUIdle"]`), 1), bearer("t0ken"), 400, `the value of "alertname" is not a string`},
		{"wrong version", mutate(func(m map[string]any) { m["version"] = "3" }), bearer("t0ken"), 400, `payload version "3" is not supported`},
		{"no alerts", mutate(func(m map[string]any) { m["alerts"] = []any{} }), bearer("t0ken"), 400, "has no alerts"},
		{"bad status", mutate(func(m map[string]any) { m["alerts"].([]any)[0].(map[string]any)["status"] = "burning" }), bearer("t0ken"), 400, `alerts[0].status "burning"`},
		{"no startsAt", mutate(func(m map[string]any) { delete(m["alerts"].([]any)[0].(map[string]any), "startsAt") }), bearer("t0ken"), 400, "alerts[0].startsAt is missing"},
		{"no alertname", mutate(func(m map[string]any) {
			delete(m["alerts"].([]any)[0].(map[string]any)["labels"].(map[string]any), "alertname")
		}), bearer("t0ken"), 400, "no alertname"},
		{"oversized", mutate(func(m map[string]any) { m["commonAnnotations"] = map[string]any{"x": strings.Repeat("y", 5000)} }), bearer("t0ken"), 413, "over 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, false)
			code, body := s.post(t, tc.body, tc.auth)
			require.Equal(t, tc.code, code, body)
			require.Contains(t, body, tc.want)
			require.Empty(t, s.engine.List(), "nothing recorded")
		})
	}
}

// The auth scheme is case-insensitive: BEARER is Bearer.
func TestWebhookBearerSchemeAnyCase(t *testing.T) {
	s := newServer(t, false)
	code, body := s.post(t, payload(t), func(r *http.Request) { r.Header.Set("Authorization", "BEARER t0ken") })
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, s.engine.List(), 1)
}

// A store that refuses writes: the notification is answered 5xx, and so
// is every retry, until its decisions are written; the reclaimer keeps
// trying in the meantime, so the retry that is answered 200 finds them in
// the store.
func TestWebhookAsksForARetryWhenItCannotRecord(t *testing.T) {
	s := newServer(t, true)
	code, body := s.post(t, payload(t), bearer("t0ken"))
	require.Equal(t, http.StatusInternalServerError, code, "Alertmanager retries 5xx")
	require.Contains(t, body, "retry")
	code, _ = s.post(t, payload(t), bearer("t0ken"))
	require.Equal(t, http.StatusInternalServerError, code, "a retry while the store still refuses")
	stored, err := s.store.Load()
	require.NoError(t, err)
	require.Empty(t, stored)

	s.healed.Store(true)
	require.Eventually(t, func() bool {
		code, _ := s.post(t, payload(t), bearer("t0ken"))
		return code == http.StatusOK
	}, 20*time.Second, 100*time.Millisecond)
	stored, err = s.store.Load()
	require.NoError(t, err)
	require.Len(t, stored, 1, "written once the store takes it")
}

func TestWebhookMethodAndAPI(t *testing.T) {
	s := newServer(t, false)
	resp, err := http.Get(s.URL + "/webhook")
	require.NoError(t, err)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	resp.Body.Close()

	s.post(t, payload(t), bearer("t0ken"))
	resp, err = http.Get(s.URL + "/api/v1/reclaims?state=pending")
	require.NoError(t, err)
	var list v1alpha1.GPUReclaimList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	resp.Body.Close()
	require.Equal(t, "GPUReclaimList", list.Kind, "the public type")
	require.Len(t, list.Items, 1)
	require.Equal(t, v1alpha1.State(reclaim.Pending), list.Items[0].Status.State)
	got, _, err := reclaim.FromAPI(&list.Items[0])
	require.NoError(t, err)
	require.Equal(t, list.Items[0].Name, got.ID)

	resp, err = http.Get(s.URL + "/api/v1/reclaims?state=done")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	resp.Body.Close()
	require.Empty(t, list.Items)

	req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/v1/reclaims/x/restore", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no admin token configured: restores are refused")
}

func TestStatusPage(t *testing.T) {
	s := newServer(t, false)
	s.post(t, payload(t), bearer("t0ken"))
	resp, err := http.Get(s.URL + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	page := b.String()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "Pending reclaims (1)")
	require.Contains(t, page, "data-science/notebook-carol")
	require.Contains(t, page, `class="countdown" data-at="2026-03-02T10:15:00Z"`)
	require.Contains(t, page, "evict")

	// A snoozed reclaim says who snoozed it and until when.
	rs := s.engine.List()
	require.Len(t, rs, 1)
	_, err = s.engine.Snooze(context.Background(), rs[0].ID, "U0CAROL", time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC), "silence-1")
	require.NoError(t, err)
	resp, err = http.Get(s.URL + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	b.Reset()
	_, _ = b.ReadFrom(resp.Body)
	require.Contains(t, b.String(), "snoozed by U0CAROL until 2026-03-02T12:00:00Z</td>")
	require.Contains(t, b.String(), "</html>", "the whole page is rendered")
}

func TestListIsPaginated(t *testing.T) {
	s := newServer(t, false)
	code, _ := s.post(t, payload(t), bearer("t0ken"))
	require.Equal(t, http.StatusOK, code)
	for _, tc := range []struct {
		query string
		code  int
	}{{"limit=1", 200}, {"limit=0", 400}, {"limit=5001", 400}, {"limit=x", 400}, {"", 200}} {
		resp, err := http.Get(s.URL + "/api/v1/reclaims?" + tc.query)
		require.NoError(t, err)
		var l v1alpha1.GPUReclaimList
		_ = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		require.Equal(t, tc.code, resp.StatusCode, tc.query)
		if tc.code == 200 {
			require.Len(t, l.Items, 1)
			require.Empty(t, l.Continue, "one page")
		}
	}

	// A second reclaim: two pages of one, the second asked for with the
	// first's continue (or after=, its name before).
	second := strings.NewReplacer(`"pod": "`, `"pod": "other-`, `"fingerprint": "5e8f0a8f0c0b2a11"`, `"fingerprint": "5e8f0a8f0c0b2a12"`).Replace(string(payload(t)))
	code, _ = s.post(t, []byte(second), bearer("t0ken"))
	require.Equal(t, http.StatusOK, code)
	page := func(query string) v1alpha1.GPUReclaimList {
		resp, err := http.Get(s.URL + "/api/v1/reclaims?" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		var l v1alpha1.GPUReclaimList
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
		return l
	}
	first := page("limit=1")
	require.Len(t, first.Items, 1)
	require.NotEmpty(t, first.Continue)
	for _, param := range []string{"continue", "after"} {
		next := page("limit=1&" + param + "=" + first.Continue)
		require.Len(t, next.Items, 1, param)
		require.NotEqual(t, first.Items[0].Name, next.Items[0].Name, param)
		require.Empty(t, next.Continue, param)
	}
}

// The status page and the API have their own auth, apart from the
// webhook's; the health probes stay open.
func TestReadersAuth(t *testing.T) {
	cfg := reclaimtest.Config(t, "webhook: {bearer_token_file: token}\nweb: {auth: {basic_auth: {username: ops, password_file: token}}}\n")
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	reg := prometheus.NewRegistry()
	eng, err := lifecycle.New(lifecycle.Options{Config: cfg, Store: st, Journal: st, Actor: &reclaimtest.Actor{}, Clock: reclaimtest.NewClock().Now, Metrics: lifecycle.NewMetrics(reg)})
	require.NoError(t, err)
	srv := httptest.NewServer(web.New(web.Options{Config: cfg, Engine: eng, Clock: time.Now, Registry: reg}))
	t.Cleanup(srv.Close)
	get := func(path string, auth func(*http.Request)) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if auth != nil {
			auth(req)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path string
		auth func(*http.Request)
		code int
	}{
		{"/", nil, 401},
		{"/api/v1/reclaims", nil, 401},
		{"/api/v1/reclaims/x", nil, 401},
		{"/api/v1/reclaims", bearer("t0ken"), 401}, // the webhook's token is not the readers'
		{"/", basic("ops", "t0ken"), 200},
		{"/api/v1/reclaims", basic("ops", "t0ken"), 200},
		{"/healthz", nil, 200},
		{"/readyz", nil, 200},
		{"/metrics", nil, 200},
	} {
		require.Equal(t, tc.code, get(tc.path, tc.auth), tc.path)
	}
}

// With every turn taken, a notification is not read: it is answered 503
// (Alertmanager retries) after TurnWait, and the one being read goes on.
func TestWebhookReadsAtMostMaxConcurrentAtOnce(t *testing.T) {
	cfg := reclaimtest.Config(t, "webhook: {bearer_token_file: token, max_concurrent: 1}\n")
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	clock := reclaimtest.NewClock()
	reg := prometheus.NewRegistry()
	eng, err := lifecycle.New(lifecycle.Options{Config: cfg, Store: st, Journal: st, Actor: &reclaimtest.Actor{}, Clock: clock.Now, Metrics: lifecycle.NewMetrics(reg)})
	require.NoError(t, err)
	srv := httptest.NewServer(web.New(web.Options{Config: cfg, Engine: eng, Clock: clock.Now, Registry: reg, TurnWait: 50 * time.Millisecond}))
	t.Cleanup(srv.Close)
	s := &server{Server: srv, engine: eng, clock: clock}

	// The first notification's body arrives slowly: it holds the one turn.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/webhook", pr)
	bearer("t0ken")(req)
	first := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	body := payload(t)
	_, err = pw.Write(body[:10])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return inFlight(t, reg) == 1
	}, 10*time.Second, 5*time.Millisecond, "the first is being read")

	code, msg := s.post(t, body, bearer("t0ken"))
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, msg, "webhook.max_concurrent")
	require.Empty(t, s.engine.List(), "nothing of the refused one was recorded")

	_, err = pw.Write(body[10:])
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.Equal(t, http.StatusOK, <-first)
	require.Len(t, s.engine.List(), 1)

	code, _ = s.post(t, body, bearer("t0ken"))
	require.Equal(t, http.StatusOK, code, "the turn is free again")
	require.Zero(t, inFlight(t, reg))
}

// inFlight reads gpureclaim_reclaimer_webhook_requests_in_flight.
func inFlight(t *testing.T, reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "gpureclaim_reclaimer_webhook_requests_in_flight" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no gpureclaim_reclaimer_webhook_requests_in_flight")
	return 0
}
