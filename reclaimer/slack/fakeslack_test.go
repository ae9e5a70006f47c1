package slack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/slack-go/slack/slacktest"
)

// fakeSlack is slacktest's server extended with what it lacks: chat.update,
// conversations.open, users.lookupByEmail that knows users, and a record of
// every message with its blocks; it can be told to fail.
type fakeSlack struct {
	*slacktest.Server
	mu         sync.Mutex
	posts      []message
	updates    []message
	ephemerals []message
	emails     map[string]string
	failures   []int // status codes to answer chat.postMessage with, in turn
	retryAfter string
	dmsDown    bool // every post to a DM fails with 503
	calls      map[string]int
	seq        int
}

type message struct {
	Channel, TS, User, Text string
	Blocks                  json.RawMessage
}

func newFakeSlack(t *testing.T) *fakeSlack {
	f := &fakeSlack{emails: map[string]string{}, calls: map[string]int{}}
	f.Server = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/chat.postMessage", f.postMessage)
		c.Handle("/chat.update", f.update)
		c.Handle("/chat.postEphemeral", f.ephemeral)
		c.Handle("/conversations.open", f.open)
		c.Handle("/users.lookupByEmail", f.lookup)
	})
	f.Start()
	t.Cleanup(f.Stop)
	return f
}

func (f *fakeSlack) count(call string) {
	f.mu.Lock()
	f.calls[call]++
	f.mu.Unlock()
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeSlack) postMessage(w http.ResponseWriter, r *http.Request) {
	f.count("chat.postMessage")
	_ = r.ParseForm()
	f.mu.Lock()
	if f.dmsDown && strings.HasPrefix(r.Form.Get("channel"), "D") {
		f.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if len(f.failures) > 0 {
		code := f.failures[0]
		f.failures = f.failures[1:]
		f.mu.Unlock()
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		w.WriteHeader(code)
		return
	}
	f.seq++
	m := message{Channel: r.Form.Get("channel"), TS: fmt.Sprintf("1772445600.%06d", f.seq), Text: r.Form.Get("text"), Blocks: json.RawMessage(r.Form.Get("blocks"))}
	f.posts = append(f.posts, m)
	f.mu.Unlock()
	reply(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS})
}

func (f *fakeSlack) update(w http.ResponseWriter, r *http.Request) {
	f.count("chat.update")
	_ = r.ParseForm()
	f.mu.Lock()
	m := message{Channel: r.Form.Get("channel"), TS: r.Form.Get("ts"), Text: r.Form.Get("text"), Blocks: json.RawMessage(r.Form.Get("blocks"))}
	f.updates = append(f.updates, m)
	f.mu.Unlock()
	reply(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS, "text": m.Text})
}

func (f *fakeSlack) ephemeral(w http.ResponseWriter, r *http.Request) {
	f.count("chat.postEphemeral")
	_ = r.ParseForm()
	f.mu.Lock()
	f.ephemerals = append(f.ephemerals, message{Channel: r.Form.Get("channel"), User: r.Form.Get("user"), Text: r.Form.Get("text")})
	f.mu.Unlock()
	reply(w, map[string]any{"ok": true, "message_ts": "1772445600.999999"})
}

func (f *fakeSlack) open(w http.ResponseWriter, r *http.Request) {
	f.count("conversations.open")
	_ = r.ParseForm()
	users := r.Form.Get("users")
	if users == "" || strings.Contains(users, ",") {
		reply(w, map[string]any{"ok": false, "error": "user_not_found"})
		return
	}
	reply(w, map[string]any{"ok": true, "channel": map[string]any{"id": "D" + strings.TrimPrefix(users, "U")}})
}

func (f *fakeSlack) lookup(w http.ResponseWriter, r *http.Request) {
	f.count("users.lookupByEmail")
	_ = r.ParseForm()
	f.mu.Lock()
	id, ok := f.emails[r.Form.Get("email")]
	f.mu.Unlock()
	if !ok {
		reply(w, map[string]any{"ok": false, "error": "users_not_found"})
		return
	}
	reply(w, map[string]any{"ok": true, "user": map[string]any{"id": id, "name": r.Form.Get("email")}})
}

func (f *fakeSlack) Posts() []message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]message(nil), f.posts...)
}

func (f *fakeSlack) Updates() []message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]message(nil), f.updates...)
}

func (f *fakeSlack) Ephemerals() []message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]message(nil), f.ephemerals...)
}

func (f *fakeSlack) Calls(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

// headers of the blocks of a message, to follow the story.
func headers(m message) string {
	var blocks []struct {
		Type string `json:"type"`
		Text *struct {
			Text string `json:"text"`
		} `json:"text"`
	}
	_ = json.Unmarshal(m.Blocks, &blocks)
	for _, b := range blocks {
		if b.Type == "header" && b.Text != nil {
			return b.Text.Text
		}
	}
	return ""
}
