package rules

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// IdleClass gives a kind of workload its own idle definition: interactive
// notebooks, batch and training jobs and inference services pause in
// different ways. A holder belongs to the first class one of whose
// selectors it matches; the others keep idle's own settings (class
// "default"). Each field left out is idle's.
type IdleClass struct {
	// Name is the class label of its holders' alerts and records; not
	// "default", which names the holders no class selects.
	Name string `yaml:"name"`
	// Match selects the class's holders: any one of the selectors.
	Match []ClassSelector `yaml:"match"`
	// Threshold, For and ReclaimAfter are the class's own idle.threshold,
	// idle.for and idle.reclaim_after; unset, the idle section's. Pauses
	// and Quiet are the class's own idle.pauses and idle.quiet; unset,
	// none.
	Threshold    float64        `yaml:"threshold"`
	For          model.Duration `yaml:"for"`
	ReclaimAfter model.Duration `yaml:"reclaim_after"`
	Pauses       *Pauses        `yaml:"pauses"`
	Quiet        *Quiet         `yaml:"quiet"`
}

// ClassSelector matches holders by what kube-state-metrics says of their
// pods; every field given must hold. Label values are regular expressions,
// anchored as Prometheus anchors them.
type ClassSelector struct {
	// Namespaces are namespace names.
	Namespaces []string `yaml:"namespaces"`
	// NamespaceLabels match kube_namespace_labels (kube-state-metrics
	// exports only the labels its --metric-labels-allowlist names).
	NamespaceLabels map[string]string `yaml:"namespace_labels"`
	// PodLabels match kube_pod_labels (the same allowlist).
	PodLabels map[string]string `yaml:"pod_labels"`
	// OwnerKinds match the pod's controller, kube_pod_owner's owner_kind:
	// a Deployment's pods are a ReplicaSet's, a Kubeflow Notebook's a
	// StatefulSet's; Jobs, PyTorchJobs and the like own their pods.
	OwnerKinds []string `yaml:"owner_kinds"`
}

// DefaultClass names the holders no class selects.
const DefaultClass = "default"

// idleClass is one class as the rules use it, every field filled.
type idleClass struct {
	name, selector string // selector: a PromQL filter of RecHeld; "" for the default class
	threshold      float64
	forDur, after  model.Duration
	pauses         *Pauses
	quiet          *Quiet
}

// idleClasses are the classes the rules build: with none configured, one
// unnamed class of idle's settings (no class label anywhere); else each
// configured class, then the default.
func (c Config) idleClasses() []idleClass {
	def := idleClass{threshold: c.Idle.Threshold, forDur: c.Idle.For, after: c.Idle.ReclaimAfter, pauses: c.Idle.Pauses, quiet: c.Idle.Quiet}
	if len(c.Idle.Classes) == 0 {
		return []idleClass{def}
	}
	var out []idleClass
	for _, k := range c.Idle.Classes {
		var sels []string
		for _, m := range k.Match {
			sels = append(sels, m.promql())
		}
		out = append(out, idleClass{name: k.Name, selector: strings.Join(sels, " or "), threshold: k.Threshold, forDur: k.For, after: k.ReclaimAfter, pauses: k.Pauses, quiet: k.Quiet})
	}
	def.name = DefaultClass
	return append(out, def)
}

// ClassQuiet is a class's quiet with the class's reclaim_after (how far
// into a pause on any other unit its idle alert fires), as the rules
// build them.
type ClassQuiet struct {
	Quiet        *Quiet
	ReclaimAfter model.Duration
}

// Quiets are the idle classes that have a quiet, by name: DefaultClass for
// the holders no class selects (idle's own settings).
func (c Config) Quiets() map[string]ClassQuiet {
	out := map[string]ClassQuiet{}
	for _, k := range c.idleClasses() {
		if k.quiet == nil {
			continue
		}
		name := k.name
		if name == "" { // no classes configured
			name = DefaultClass
		}
		out[name] = ClassQuiet{Quiet: k.quiet, ReclaimAfter: k.after}
	}
	return out
}

// promql filters RecHeld to the holders a selector matches.
func (m ClassSelector) promql() string {
	held := names.RecHeld
	if len(m.Namespaces) > 0 {
		var quoted []string
		for _, n := range m.Namespaces {
			quoted = append(quoted, regexp.QuoteMeta(n))
		}
		held += fmt.Sprintf(`{namespace=~%q}`, strings.Join(quoted, "|"))
	}
	e := held
	if len(m.NamespaceLabels) > 0 {
		e += fmt.Sprintf(" and on (namespace) kube_namespace_labels{%s}", ksmLabels(m.NamespaceLabels))
	}
	if len(m.PodLabels) > 0 {
		e += fmt.Sprintf(" and on (namespace, pod) kube_pod_labels{%s}", ksmLabels(m.PodLabels))
	}
	if len(m.OwnerKinds) > 0 {
		e += fmt.Sprintf(` and on (namespace, pod) kube_pod_owner{owner_kind=~%q,owner_is_controller="true"}`, strings.Join(m.OwnerKinds, "|"))
	}
	return e
}

// ksmLabels is a label matcher on kube-state-metrics' names for Kubernetes
// labels: label_ and the key (names.KSMName).
func ksmLabels(ls map[string]string) string {
	keys := make([]string, 0, len(ls))
	for k := range ls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("label_%s=~%q", names.KSMName(k), ls[k]))
	}
	return strings.Join(out, ",")
}

// ownerClassRule records each holder's class: the first class that selects
// it, else the default.
func ownerClassRule(c Config) []Rule {
	ks := c.idleClasses()
	if len(ks) == 1 {
		return nil
	}
	var parts []string
	for _, k := range ks {
		sel := k.selector
		if sel == "" {
			sel = names.RecHeld
		}
		parts = append(parts, fmt.Sprintf("  label_replace(max by (%s) (%s), %q, %q, \"\", \"\")\n",
			ownerKey, sel, names.LabelClass, k.name))
	}
	return []Rule{{Record: names.RecOwnerClass, Expr: Expr(strings.Join(parts, "or on ("+ownerKey+")\n"))}}
}

// held is the holders of the class, with the class label when classes are
// configured.
func (k idleClass) held() string {
	if k.name == "" {
		return names.RecHeld
	}
	return fmt.Sprintf("(%s * on (%s) group_left (%s) %s{%s=%q})", names.RecHeld, ownerKey, names.LabelClass, names.RecOwnerClass, names.LabelClass, k.name)
}

var className = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// validateClasses checks idle.classes and fills each class's settings
// left out with idle's.
func (c *Config) validateClasses() []error {
	var errs problems
	seen := map[string]bool{}
	var window model.Duration
	if c.Idle.Pauses != nil {
		window = c.Idle.Pauses.Window
	}
	var nsWindow model.Duration
	if c.Idle.Quiet != nil {
		nsWindow = c.Idle.Quiet.NamespaceWindow
	}
	for i := range c.Idle.Classes {
		k := &c.Idle.Classes[i]
		field := fmt.Sprintf("idle.classes[%d]", i)
		switch {
		case !className.MatchString(k.Name):
			errs = append(errs, fmt.Errorf("%s.name: %q is not a class name (lower case letters, digits, - and _)", field, k.Name))
		case k.Name == DefaultClass:
			errs = append(errs, fmt.Errorf("%s.name: %q names the holders no class selects", field, k.Name))
		case seen[k.Name]:
			errs = append(errs, fmt.Errorf("%s.name: %q is taken by an earlier class", field, k.Name))
		}
		seen[k.Name] = true
		if len(k.Match) == 0 {
			errs = append(errs, fmt.Errorf("%s.match: give at least one selector (namespaces, namespace_labels, pod_labels, owner_kinds)", field))
		}
		for j, m := range k.Match {
			errs = append(errs, m.validate(fmt.Sprintf("%s.match[%d]", field, j))...)
		}
		if k.Threshold == 0 {
			k.Threshold = c.Idle.Threshold
		}
		errs.ratio(field+".threshold", k.Threshold)
		if k.For == 0 {
			k.For = c.Idle.For
		}
		if k.ReclaimAfter == 0 {
			k.ReclaimAfter = c.Idle.ReclaimAfter
		}
		errs.positive(field+".for", k.For)
		errs.positive(field+".reclaim_after", k.ReclaimAfter)
		if k.Quiet != nil {
			errs = append(errs, fillQuiet(field+".quiet", k.Quiet, k.ReclaimAfter)...)
			if nsWindow == 0 {
				nsWindow = k.Quiet.NamespaceWindow
			} else if k.Quiet.NamespaceWindow != nsWindow {
				errs = append(errs, fmt.Errorf("%s.quiet.namespace_window: %s differs from %s: the rules keep one record of a namespace's work", field, k.Quiet.NamespaceWindow, nsWindow))
			}
		}
		if k.Pauses != nil {
			errs = append(errs, fillPauses(field+".pauses", k.Pauses)...)
			if window == 0 {
				window = k.Pauses.Window
			} else if k.Pauses.Window != window {
				errs = append(errs, fmt.Errorf("%s.pauses.window: %s differs from %s: the rules keep one history of pauses", field, k.Pauses.Window, window))
			}
		}
	}
	return errs
}

var (
	ownerKind = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	labelKey  = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

func (m ClassSelector) validate(field string) []error {
	var errs []error
	if len(m.Namespaces) == 0 && len(m.NamespaceLabels) == 0 && len(m.PodLabels) == 0 && len(m.OwnerKinds) == 0 {
		errs = append(errs, fmt.Errorf("%s: selects every holder; give namespaces, namespace_labels, pod_labels or owner_kinds", field))
	}
	for _, n := range m.Namespaces {
		if !labelKey.MatchString(n) || strings.Contains(n, "/") {
			errs = append(errs, fmt.Errorf("%s.namespaces: %q is not a namespace name", field, n))
		}
	}
	for what, ls := range map[string]map[string]string{"namespace_labels": m.NamespaceLabels, "pod_labels": m.PodLabels} {
		for k, v := range ls {
			if !labelKey.MatchString(k) {
				errs = append(errs, fmt.Errorf("%s.%s: %q is not a Kubernetes label key", field, what, k))
			}
			if _, err := regexp.Compile("^(?:" + v + ")$"); err != nil {
				errs = append(errs, fmt.Errorf("%s.%s[%s]: %q is not a regular expression: %v", field, what, k, v, err))
			}
		}
	}
	for _, k := range m.OwnerKinds {
		if !ownerKind.MatchString(k) {
			errs = append(errs, fmt.Errorf("%s.owner_kinds: %q is not a kind (e.g. Job, ReplicaSet)", field, k))
		}
	}
	return errs
}
