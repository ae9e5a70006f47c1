package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	promconfig "github.com/prometheus/common/config"
)

// How a workload kind is stopped.
const (
	// StopScale sets the replicas through the scale subresource.
	StopScale = "scale"
	// StopPatch applies a JSON merge patch (suspend, a stop annotation).
	StopPatch = "patch"
)

// Workload is a kind of top owner the reclaimer knows how to stop and
// restore, the way its own controller expects. The built-in kinds are
// entries of the same shape (BuiltinWorkloads); the config adds its own
// and may turn a built-in one off.
type Workload struct {
	// Name identifies the entry; a built-in one's name (with disabled
	// alone) turns it off. To stop a built-in kind another way, turn it
	// off and declare the kind under another name.
	Name string `yaml:"name"`
	// Group, Version, Kind and Resource (the plural) name the API type.
	// An owner matches on group and kind; it is read and patched at the
	// version its ownerReference names.
	Group    string `yaml:"group"`
	Version  string `yaml:"version"`
	Kind     string `yaml:"kind"`
	Resource string `yaml:"resource"`
	// Scale stops the kind through its scale subresource (to the policy's
	// scale_down_to) and restores the replicas it had.
	Scale bool `yaml:"scale"`
	// Stop and Restore are JSON merge patches written as YAML. The string
	// "$now" in Stop becomes the time of the action (RFC 3339).
	Stop    map[string]any `yaml:"stop"`
	Restore map[string]any `yaml:"restore"`
	// Stopped and Restored are the verbs messages use ("suspended", "resumed").
	Stopped  string `yaml:"stopped"`
	Restored string `yaml:"restored"`
	// Disabled turns a built-in kind off: its pods are only reported.
	Disabled bool `yaml:"disabled"`

	StopPatch    []byte `yaml:"-"`
	RestorePatch []byte `yaml:"-"`
}

// Method is StopScale or StopPatch.
func (w Workload) Method() string {
	if w.Scale {
		return StopScale
	}
	return StopPatch
}

// APIGroupKind is "Kind.group" (or "Kind" for the core group), as
// Kubernetes writes a group kind.
func (w Workload) APIGroupKind() string {
	if w.Group == "" {
		return w.Kind
	}
	return w.Kind + "." + w.Group
}

func suspend(path ...string) (stop, restore map[string]any) {
	build := func(v bool) map[string]any {
		m := map[string]any{"suspend": v}
		for i := len(path) - 1; i >= 0; i-- {
			m = map[string]any{path[i]: m}
		}
		return map[string]any{"spec": m}
	}
	return build(true), build(false)
}

func annotation(key string, value any) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}}
}

// KueueQueueLabel marks a job Kueue admits; Kueue owns its suspension.
const KueueQueueLabel = "kueue.x-k8s.io/queue-name"

// BuiltinWorkloads are the kinds the reclaimer stops out of the box, with
// the upstream versions they were written against.
func BuiltinWorkloads() []Workload {
	ws := []Workload{
		{Name: "deployment", Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", Scale: true},
		{Name: "statefulset", Group: "apps", Version: "v1", Kind: "StatefulSet", Resource: "statefulsets", Scale: true},
		{Name: "replicaset", Group: "apps", Version: "v1", Kind: "ReplicaSet", Resource: "replicasets", Scale: true},
		// LeaderWorkerSet v0.7.
		{Name: "leaderworkerset", Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet", Resource: "leaderworkersets", Scale: true},
		{Name: "job", Group: "batch", Version: "v1", Kind: "Job", Resource: "jobs"},
		// JobSet v0.10.
		{Name: "jobset", Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet", Resource: "jobsets"},
		// KubeRay v1.5.
		{Name: "raycluster", Group: "ray.io", Version: "v1", Kind: "RayCluster", Resource: "rayclusters"},
		{Name: "rayjob", Group: "ray.io", Version: "v1", Kind: "RayJob", Resource: "rayjobs"},
		// Kubeflow Trainer v2.0.
		{Name: "trainjob", Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob", Resource: "trainjobs"},
	}
	for i := range ws {
		if !ws[i].Scale {
			ws[i].Stop, ws[i].Restore = suspend()
			ws[i].Stopped, ws[i].Restored = "suspended", "resumed"
		}
		if ws[i].Kind == "RayJob" {
			// KubeRay deletes a suspended RayJob's cluster and runs the
			// job anew on resume.
			ws[i].Restored = "resumed: the Ray job starts again from the beginning"
		}
	}
	// Kubeflow training-operator v1.8: the jobs suspend through their run policy.
	for _, k := range []string{"PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob"} {
		w := Workload{Name: strings.ToLower(k), Group: "kubeflow.org", Version: "v1", Kind: k, Resource: strings.ToLower(k) + "s", Stopped: "suspended", Restored: "resumed"}
		w.Stop, w.Restore = suspend("runPolicy")
		ws = append(ws, w)
	}
	ws = append(ws,
		// Kubeflow notebook-controller v1.10: the annotation scales its StatefulSet to 0.
		Workload{Name: "notebook", Group: "kubeflow.org", Version: "v1", Kind: "Notebook", Resource: "notebooks",
			Stop: annotation("kubeflow-resource-stopped", "$now"), Restore: annotation("kubeflow-resource-stopped", nil), Stopped: "stopped", Restored: "started"},
		// KServe v0.15: the stop annotation deletes the predictor's pods and keeps the service.
		Workload{Name: "inferenceservice", Group: "serving.kserve.io", Version: "v1beta1", Kind: "InferenceService", Resource: "inferenceservices",
			Stop: annotation("serving.kserve.io/stop", "true"), Restore: annotation("serving.kserve.io/stop", nil), Stopped: "stopped", Restored: "started"},
	)
	for i := range ws {
		ws[i].encode()
	}
	return ws
}

// encode writes the patches as the JSON the API server takes.
func (w *Workload) encode() {
	if w.Scale {
		w.StopPatch, w.RestorePatch = nil, nil
		return
	}
	w.StopPatch, _ = json.Marshal(w.Stop)
	w.RestorePatch, _ = json.Marshal(w.Restore)
}

// Kueue is how the reclaimer treats jobs that Kueue admits.
type Kueue struct {
	// Enabled deactivates the Kueue Workload of a job that carries
	// kueue.x-k8s.io/queue-name, instead of suspending the job (Kueue
	// would unsuspend it). Off, such jobs are only reported. Default true.
	Enabled *bool `yaml:"enabled"`
}

// On says whether Kueue Workloads are deactivated.
func (k Kueue) On() bool { return k.Enabled == nil || *k.Enabled }

// JupyterHub is the hub whose single-user servers the reclaimer stops
// through the hub's REST API, as the hub's own idle culler does.
type JupyterHub struct {
	// URL of the hub's API, e.g. http://hub.jupyterhub:8081/hub/api.
	URL string `yaml:"url"`
	// HTTP authenticates with an API token that has the admin:servers
	// scope: authorization: {type: token, credentials_file: ...}.
	HTTP HTTPClient `yaml:",inline"`
	// TokenFile is the token's file as the first releases wrote it;
	// deprecated, read as authorization of type token.
	TokenFile string `yaml:"token_file"`
	// Timeout of one API call. Default 30s.
	Timeout Duration `yaml:"timeout"`
}

// UnmarshalYAML starts from the HTTP client's defaults.
func (h *JupyterHub) UnmarshalYAML(unmarshal func(any) error) error {
	type plain JupyterHub
	*h = JupyterHub{HTTP: DefaultHTTPClient()}
	return unmarshal((*plain)(h))
}

var (
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	kindName     = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	versionName  = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]+)?$`)
)

// validateWorkloads merges the config's entries over the built-in ones.
func (cfg *Config) validateWorkloads(c *checker) {
	builtin := BuiltinWorkloads()
	byName := map[string]int{}
	for i, w := range builtin {
		byName[w.Name] = i
	}
	merged := builtin
	seen := map[string]bool{}
	for i, w := range cfg.Workloads {
		field := fmt.Sprintf("workloads[%d]", i)
		if w.Name == "" {
			c.errorf(field+".name", "is required")
			continue
		}
		if seen[w.Name] {
			c.errorf(field+".name", "%q is used by another entry", w.Name)
			continue
		}
		seen[w.Name] = true
		j, isBuiltin := byName[w.Name]
		if isBuiltin {
			// Only turning a built-in kind off (or on): its stop and restore
			// are the ones its controller's contract needs.
			if w.Scale || w.Stop != nil || w.Restore != nil || w.Group != "" || w.Version != "" || w.Kind != "" || w.Resource != "" {
				c.errorf(field, "overrides built-in %q: a built-in kind can only be disabled", w.Name)
				continue
			}
			merged[j].Disabled = w.Disabled
			continue
		}
		w.validate(c, field)
		byName[w.Name] = len(merged)
		merged = append(merged, w)
	}
	kinds := map[string]string{}
	for i := range merged {
		w := &merged[i]
		if prev, ok := kinds[w.APIGroupKind()]; ok && !w.Disabled {
			c.errorf("workloads", "%s is declared twice (%q and %q)", w.APIGroupKind(), prev, w.Name)
		}
		if !w.Disabled {
			kinds[w.APIGroupKind()] = w.Name
		}
		w.encode()
	}
	cfg.Workloads = merged

	if h := cfg.Kubernetes.JupyterHub; h != nil {
		c.url("kubernetes.jupyterhub.url", h.URL, true)
		if h.TokenFile != "" {
			if h.HTTP.Authorization != nil {
				c.errorf("kubernetes.jupyterhub.token_file", "and authorization: give authorization only")
			} else {
				c.warnf("kubernetes.jupyterhub.token_file", "is deprecated and goes in a later release: write authorization: {type: token, credentials_file: %s}", h.TokenFile)
				h.HTTP.Authorization = &promconfig.Authorization{Type: "token", CredentialsFile: h.TokenFile}
				h.TokenFile = ""
			}
		}
		if h.HTTP.Authorization == nil && h.HTTP.OAuth2 == nil && h.HTTP.BearerTokenFile == "" && h.HTTP.BearerToken == "" {
			c.errorf("kubernetes.jupyterhub.authorization", "is required: the hub's API needs a token with the admin:servers scope")
		}
		c.httpClient("kubernetes.jupyterhub", &h.HTTP)
		c.duration("kubernetes.jupyterhub.timeout", &h.Timeout, defaultHubTimeout)
	}
}

func (w *Workload) validate(c *checker, field string) {
	if w.Group != "" && !dnsSubdomain.MatchString(w.Group) {
		c.errorf(field+".group", "%q is not an API group (e.g. example.com, or empty for the core group)", w.Group)
	}
	if !versionName.MatchString(w.Version) {
		c.errorf(field+".version", "%q is not an API version (e.g. v1, v1beta2)", w.Version)
	}
	if !kindName.MatchString(w.Kind) {
		c.errorf(field+".kind", "%q is not a kind (e.g. TrainingRun)", w.Kind)
	}
	if !dnsSubdomain.MatchString(w.Resource) || strings.Contains(w.Resource, ".") {
		c.errorf(field+".resource", "%q is not a resource (the lower-case plural, e.g. trainingruns)", w.Resource)
	}
	switch {
	case w.Scale && (w.Stop != nil || w.Restore != nil):
		c.errorf(field, "has scale and a stop or restore patch: choose one")
	case !w.Scale && (len(w.Stop) == 0 || len(w.Restore) == 0):
		c.errorf(field, "needs stop and restore (JSON merge patches), or scale: true")
	}
	if w.Group == "" && w.Kind != "ReplicationController" {
		// Pods, Nodes, PVCs, Secrets...: the core group's one workload that
		// is not built in is a ReplicationController.
		c.errorf(field+".kind", "%s is not a workload the reclaimer stops: a bare pod is evicted, nothing else in the core group is touched", w.Kind)
	}
	if len(w.Stop) > 0 && reflect.DeepEqual(w.Stop, w.Restore) {
		c.errorf(field+".restore", "is the same as stop: it would undo nothing")
	}
	for _, p := range []struct {
		name  string
		patch map[string]any
	}{{"stop", w.Stop}, {"restore", w.Restore}} {
		if p.patch != nil {
			checkPatch(c, field+"."+p.name, p.patch)
		}
	}
	if len(w.Stop) > 0 && len(w.Restore) > 0 {
		for _, path := range leaves(w.Stop, nil) {
			if !hasPath(w.Restore, path) {
				c.errorf(field+".restore", "does not undo %s, which stop sets: a restore must set it back (or to null)", strings.Join(path, "."))
			}
		}
	}
	if !w.Scale {
		if w.Stopped == "" {
			w.Stopped = "stopped"
		}
		if w.Restored == "" {
			w.Restored = "restored"
		}
	}
}

// endsForGood are spec fields a stop may not set: each ends a workload for
// good (its controller fails or deletes it), which no restore undoes.
var endsForGood = []string{"activeDeadlineSeconds", "ttlSecondsAfterFinished"}

// checkSpec holds a patch under spec to setting values: a null at any
// depth deletes the field (a pod template, a worker group) for good.
func checkSpec(c *checker, field string, m map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f := field + "." + k
		switch v := m[k].(type) {
		case nil:
			c.errorf(f, "is null, which deletes it: a stop or restore patch only sets fields under spec")
		case map[string]any:
			checkSpec(c, f, v)
		}
		if slices.Contains(endsForGood, k) {
			c.errorf(f, "ends the workload for good, which no restore undoes")
		}
	}
}

// maxPatchBytes bounds a stop or restore patch: a few fields, not a manifest.
const maxPatchBytes = 64 << 10

// checkPatch holds a stop or restore patch to what stopping a workload
// may change: fields under spec, and annotations and labels; never the
// whole spec or metadata (a null there deletes it), never identity or
// ownership (name, namespace, ownerReferences, finalizers, ...).
func checkPatch(c *checker, field string, patch map[string]any) {
	b, err := json.Marshal(patch)
	if err != nil {
		c.errorf(field, "is not a JSON merge patch: %v", err)
		return
	}
	if len(b) > maxPatchBytes {
		c.errorf(field, "is %d bytes; a stop or restore patch is at most %d", len(b), maxPatchBytes)
	}
	for _, k := range slices.Sorted(maps.Keys(patch)) {
		v := patch[k]
		switch k {
		case "spec":
			m, ok := v.(map[string]any)
			if !ok || len(m) == 0 {
				c.errorf(field+".spec", "must be an object of the fields to change, not %s", describeValue(v))
				continue
			}
			checkSpec(c, field+".spec", m)
		case "metadata":
			m, ok := v.(map[string]any)
			if !ok || len(m) == 0 {
				c.errorf(field+".metadata", "must be an object of annotations or labels, not %s", describeValue(v))
				continue
			}
			for _, mk := range slices.Sorted(maps.Keys(m)) {
				if mk != "annotations" && mk != "labels" {
					c.errorf(field+".metadata."+mk, "is not for a stop or restore patch to change: only metadata.annotations and metadata.labels")
					continue
				}
				if am, ok := m[mk].(map[string]any); !ok || len(am) == 0 {
					c.errorf(field+".metadata."+mk, "must be an object of keys to set (or null to remove), not %s", describeValue(m[mk]))
				}
			}
		default:
			c.errorf(field, "patches %q; a stop or restore patch changes only spec and metadata", k)
		}
	}
}

func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an empty object"
	default:
		return fmt.Sprintf("%T %v", v, v)
	}
}

// leaves lists the paths a patch sets to a value: [spec suspend].
func leaves(m map[string]any, prefix []string) [][]string {
	var out [][]string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p := append(slices.Clone(prefix), k)
		if sub, ok := m[k].(map[string]any); ok && len(sub) > 0 {
			out = append(out, leaves(sub, p)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// hasPath says whether a patch sets a path (to any value, null included),
// or replaces a parent of it.
func hasPath(m map[string]any, path []string) bool {
	v, ok := m[path[0]]
	if !ok {
		return false
	}
	sub, isMap := v.(map[string]any)
	return len(path) == 1 || !isMap || hasPath(sub, path[1:])
}

// WorkloadFor finds the enabled entry for an API group and kind.
func (cfg *Config) WorkloadFor(group, kind string) (Workload, bool) {
	if w := FindWorkload(cfg.Workloads, group, kind); w != nil {
		return *w, !w.Disabled
	}
	return Workload{}, false
}

// FindWorkload finds the entry for an API group and kind: the enabled
// one (a built-in kind disabled and declared anew), else a disabled one.
func FindWorkload(ws []Workload, group, kind string) *Workload {
	var off *Workload
	for i := range ws {
		if ws[i].Group == group && ws[i].Kind == kind {
			if !ws[i].Disabled {
				return &ws[i]
			}
			if off == nil {
				off = &ws[i]
			}
		}
	}
	if off != nil {
		return off
	}
	return nil
}
