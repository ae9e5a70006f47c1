package reclaim

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/alertmanager/template"
)

// Notification is Alertmanager's webhook payload, version 4, as its docs
// define it. It is declared here rather than taken from Alertmanager's
// notify package, which would link every notifier integration and the
// gossip cluster into the reclaimer.
type Notification struct {
	*template.Data
	Version         string `json:"version"`
	GroupKey        string `json:"groupKey"`
	TruncatedAlerts uint64 `json:"truncatedAlerts"`

	// Received is when its request began: webhook.answer_within counts
	// from there, as Alertmanager's timeout does.
	Received time.Time `json:"-"`

	// body is the notification as it came, which the journal keeps: nil
	// when it was built here, and then encoded for the journal.
	body []byte
}

// DecodeNotification reads and validates an Alertmanager webhook
// notification. The label names and values its alerts repeat (alertname,
// namespace, node) are read once and shared: a notification of 100,000
// alerts repeats most of its 1.4 million labels. A member named twice is
// refused. The notification keeps body, for the journal.
func DecodeNotification(body []byte) (*Notification, error) {
	n := Notification{body: body}
	in := interner{}
	if err := json.Unmarshal(body, &n, json.WithUnmarshalers(json.JoinUnmarshalers(
		json.UnmarshalFromFunc(in.kv), json.UnmarshalFromFunc(in.string)))); err != nil {
		return nil, fmt.Errorf("not an Alertmanager notification: %w", err)
	}
	if n.Version != "4" {
		return nil, fmt.Errorf("payload version %q is not supported (want 4, Alertmanager 0.x)", n.Version)
	}
	if n.Data == nil || len(n.Alerts) == 0 {
		return nil, errors.New("the notification has no alerts")
	}
	for i, a := range n.Alerts {
		if a.Status != "firing" && a.Status != "resolved" {
			return nil, fmt.Errorf("alerts[%d].status %q is neither firing nor resolved", i, a.Status)
		}
		if a.StartsAt.IsZero() {
			return nil, fmt.Errorf("alerts[%d].startsAt is missing", i)
		}
		if a.Status == "resolved" && a.EndsAt.Before(a.StartsAt) {
			return nil, fmt.Errorf("alerts[%d] is resolved before it started", i)
		}
		if len(a.Labels) == 0 || a.Labels["alertname"] == "" {
			return nil, fmt.Errorf("alerts[%d] has no alertname label", i)
		}
		if a.StartsAt.After(time.Now().Add(24 * time.Hour)) {
			return nil, fmt.Errorf("alerts[%d].startsAt %s is in the future", i, a.StartsAt.Format(time.RFC3339))
		}
	}
	return &n, nil
}

// Body is the notification as the journal keeps it.
func (n *Notification) Body() ([]byte, error) {
	if n.body != nil {
		return n.body, nil
	}
	return json.Marshal(n)
}

// interner shares the strings a notification repeats. It keeps the first
// internLimit distinct ones: those that repeat (label names, a namespace)
// come early and often, and a unique one (a pod's name) costs what it
// would anyway.
type interner map[string]string

const internLimit = 1 << 10

func (in interner) string(dec *jsontext.Decoder, s *string) error {
	if dec.PeekKind() != '"' {
		return json.SkipFunc // the default error for a string field
	}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	*s, err = in.intern(v)
	return err
}

// kv reads labels or annotations: an object of strings, or null.
func (in interner) kv(dec *jsontext.Decoder, kv *template.KV) error {
	if dec.PeekKind() != '{' {
		return json.SkipFunc
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	m := template.KV{}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return err
		}
		k, err := in.intern(name)
		if err != nil {
			return err
		}
		if dec.PeekKind() != '"' {
			return fmt.Errorf("%s: the value of %q is not a string", dec.StackPointer(), k)
		}
		value, err := dec.ReadValue()
		if err != nil {
			return err
		}
		if m[k], err = in.intern(value); err != nil {
			return err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	*kv = m
	return nil
}

// intern unquotes a JSON string, and returns the copy it keeps if it has one.
func (in interner) intern(quoted jsontext.Value) (string, error) {
	b := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(b, '\\') >= 0 {
		var err error
		if b, err = jsontext.AppendUnquote(nil, quoted); err != nil {
			return "", err
		}
	}
	if s, ok := in[string(b)]; ok {
		return s, nil
	}
	s := string(b)
	if len(in) < internLimit {
		in[s] = s
	}
	return s, nil
}
