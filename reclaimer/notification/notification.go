// Package notification reads Alertmanager's webhook notifications: the
// payload, version 4, decoded with the strings it repeats shared.
package notification

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/prometheus/model/labels"
)

// Notification is Alertmanager's webhook payload, version 4, as its docs
// define it. It is declared here rather than taken from Alertmanager's
// notify package, which would link every notifier integration and the
// gossip cluster into the reclaimer; its label sets are Prometheus's
// labels.Labels, one string each, where Alertmanager's template.Data has
// maps: 100,000 alerts hold 27 MB of labels rather than 96 MB.
type Notification struct {
	Version           string        `json:"version"`
	GroupKey          string        `json:"groupKey"`
	TruncatedAlerts   uint64        `json:"truncatedAlerts"`
	Receiver          string        `json:"receiver"`
	Status            string        `json:"status"`
	Alerts            []Alert       `json:"alerts"`
	GroupLabels       labels.Labels `json:"groupLabels"`
	CommonLabels      labels.Labels `json:"commonLabels"`
	CommonAnnotations labels.Labels `json:"commonAnnotations"`
	ExternalURL       string        `json:"externalURL"`

	// Received is when its request began: webhook.answer_within counts
	// from there, as Alertmanager's timeout does.
	Received time.Time `json:"-"`

	// body is the notification as it came, which the journal keeps: nil
	// when it was built here, and then encoded for the journal.
	body []byte
}

// Alert is one alert of a notification.
type Alert struct {
	Status       string        `json:"status"`
	Labels       labels.Labels `json:"labels"`
	Annotations  labels.Labels `json:"annotations"`
	StartsAt     time.Time     `json:"startsAt"`
	EndsAt       time.Time     `json:"endsAt"`
	GeneratorURL string        `json:"generatorURL"`
	Fingerprint  string        `json:"fingerprint"`
}

// Decode reads and validates an Alertmanager webhook
// notification. The label names and values its alerts repeat (alertname,
// namespace, node) are read once and shared while it is read, and each
// alert's label set is kept as one string. A member named twice is
// refused. The notification keeps body, for the journal.
func Decode(body []byte) (*Notification, error) {
	n := Notification{body: body}
	in := interner{strings: map[string]string{}, labels: labels.NewScratchBuilder(16)}
	if err := json.Unmarshal(body, &n, json.WithUnmarshalers(json.JoinUnmarshalers(
		json.UnmarshalFromFunc(in.labelSet), json.UnmarshalFromFunc(in.string)))); err != nil {
		return nil, fmt.Errorf("not an Alertmanager notification: %w", err)
	}
	if n.Version != "4" {
		return nil, fmt.Errorf("payload version %q is not supported (want 4, Alertmanager 0.x)", n.Version)
	}
	if len(n.Alerts) == 0 {
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
		if a.Labels.Get("alertname") == "" {
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
type interner struct {
	strings map[string]string
	labels  labels.ScratchBuilder
}

const internLimit = 1 << 10

func (in *interner) string(dec *jsontext.Decoder, s *string) error {
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

// labelSet reads labels or annotations: an object of strings, or null.
func (in *interner) labelSet(dec *jsontext.Decoder, ls *labels.Labels) error {
	if dec.PeekKind() != '{' {
		return json.SkipFunc
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	b := &in.labels
	b.Reset()
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
		v, err := in.intern(value)
		if err != nil {
			return err
		}
		b.Add(k, v)
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	b.Sort()
	*ls = b.Labels()
	return nil
}

// intern unquotes a JSON string, and returns the copy it keeps if it has one.
func (in *interner) intern(quoted jsontext.Value) (string, error) {
	b := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(b, '\\') >= 0 {
		var err error
		if b, err = jsontext.AppendUnquote(nil, quoted); err != nil {
			return "", err
		}
	}
	if s, ok := in.strings[string(b)]; ok {
		return s, nil
	}
	s := string(b)
	if len(in.strings) < internLimit {
		in.strings[s] = s
	}
	return s, nil
}
