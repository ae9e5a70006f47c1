// Package fakeslack is slacktest's server extended with what it lacks:
// chat.update, conversations.open, conversations.history with message
// metadata, users.lookupByEmail that knows users, a record of every
// message with its blocks, and failures on demand.
package fakeslack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/slack-go/slack/slacktest"
)

// Server is a fake Slack Web API.
type Server struct {
	*slacktest.Server
	mu         sync.Mutex
	posts      []Message
	updates    []Message
	ephemerals []Message
	emails     map[string]string
	failures   []int // status codes to answer chat.postMessage with, in turn
	lost       int   // posts to record and then answer 500, as if the reply was lost
	retryAfter string
	dmsDown    bool
	calls      map[string]int
	seq        int
}

// Message is a message as Slack received it.
type Message struct {
	Channel, TS, User, Text string
	Blocks                  json.RawMessage
	Metadata                json.RawMessage
}

// New starts a server; it stops at the end of the test.
func New(t testing.TB) *Server {
	f := &Server{emails: map[string]string{}, calls: map[string]int{}}
	f.Server = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/chat.postMessage", f.postMessage)
		c.Handle("/chat.update", f.update)
		c.Handle("/chat.postEphemeral", f.ephemeral)
		c.Handle("/conversations.open", f.open)
		c.Handle("/conversations.history", f.history)
		c.Handle("/users.lookupByEmail", f.lookup)
	})
	f.Start()
	t.Cleanup(f.Stop)
	return f
}

func (f *Server) count(call string) {
	f.mu.Lock()
	f.calls[call]++
	f.mu.Unlock()
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Server) postMessage(w http.ResponseWriter, r *http.Request) {
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
	m := Message{Channel: r.Form.Get("channel"), TS: fmt.Sprintf("1772445600.%06d", f.seq), Text: r.Form.Get("text"), Blocks: json.RawMessage(r.Form.Get("blocks"))}
	if md := r.Form.Get("metadata"); md != "" {
		m.Metadata = json.RawMessage(md)
	}
	f.posts = append(f.posts, m)
	lost := f.lost > 0
	if lost {
		f.lost--
	}
	f.mu.Unlock()
	if lost {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	reply(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS})
}

// history answers a channel's messages, newest first, with their metadata
// when include_all_metadata is set.
func (f *Server) history(w http.ResponseWriter, r *http.Request) {
	f.count("conversations.history")
	_ = r.ParseForm()
	withMetadata := r.Form.Get("include_all_metadata") == "1"
	f.mu.Lock()
	var msgs []map[string]any
	for i := len(f.posts) - 1; i >= 0; i-- {
		p := f.posts[i]
		if p.Channel != r.Form.Get("channel") {
			continue
		}
		m := map[string]any{"type": "message", "ts": p.TS, "text": p.Text}
		if withMetadata && p.Metadata != nil {
			m["metadata"] = p.Metadata
		}
		msgs = append(msgs, m)
	}
	f.mu.Unlock()
	reply(w, map[string]any{"ok": true, "messages": msgs, "has_more": false})
}

// LoseReplies records the next n posts and answers each 500, as when the
// message went out and its reply was lost.
func (f *Server) LoseReplies(n int) {
	f.mu.Lock()
	f.lost += n
	f.mu.Unlock()
}

func (f *Server) update(w http.ResponseWriter, r *http.Request) {
	f.count("chat.update")
	_ = r.ParseForm()
	f.mu.Lock()
	m := Message{Channel: r.Form.Get("channel"), TS: r.Form.Get("ts"), Text: r.Form.Get("text"), Blocks: json.RawMessage(r.Form.Get("blocks"))}
	f.updates = append(f.updates, m)
	f.mu.Unlock()
	reply(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS, "text": m.Text})
}

func (f *Server) ephemeral(w http.ResponseWriter, r *http.Request) {
	f.count("chat.postEphemeral")
	_ = r.ParseForm()
	f.mu.Lock()
	f.ephemerals = append(f.ephemerals, Message{Channel: r.Form.Get("channel"), User: r.Form.Get("user"), Text: r.Form.Get("text")})
	f.mu.Unlock()
	reply(w, map[string]any{"ok": true, "message_ts": "1772445600.999999"})
}

func (f *Server) open(w http.ResponseWriter, r *http.Request) {
	f.count("conversations.open")
	_ = r.ParseForm()
	users := r.Form.Get("users")
	if users == "" || strings.Contains(users, ",") {
		reply(w, map[string]any{"ok": false, "error": "user_not_found"})
		return
	}
	reply(w, map[string]any{"ok": true, "channel": map[string]any{"id": "D" + strings.TrimPrefix(users, "U")}})
}

func (f *Server) lookup(w http.ResponseWriter, r *http.Request) {
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

func (f *Server) Posts() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.posts...)
}

func (f *Server) Updates() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.updates...)
}

func (f *Server) Ephemerals() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.ephemerals...)
}

func (f *Server) Calls(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

// Header is the header block's text of a message, to follow the story.
func Header(m Message) string {
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

// AddUser makes users.lookupByEmail know an address.
func (f *Server) AddUser(email, id string) {
	f.mu.Lock()
	f.emails[email] = id
	f.mu.Unlock()
}

// FailPosts answers the next chat.postMessage calls with these status codes
// (a 429 carries Retry-After: retryAfter seconds).
func (f *Server) FailPosts(retryAfter string, codes ...int) {
	f.mu.Lock()
	f.failures, f.retryAfter = append(f.failures, codes...), retryAfter
	f.mu.Unlock()
}

// DMsDown makes every post to a DM fail with 503.
func (f *Server) DMsDown(down bool) {
	f.mu.Lock()
	f.dmsDown = down
	f.mu.Unlock()
}
