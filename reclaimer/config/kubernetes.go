package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultQPS is kubernetes.qps unless set: 10,000 reclaims of one
// notification persisted in under 30 s where the apiserver allows it.
const DefaultQPS = 500

// Kubernetes is the cluster the reclaimer evicts and scales in.
type Kubernetes struct {
	// Enabled turns the Kubernetes actions and checks on. Default true.
	Enabled *bool `yaml:"enabled"`
	// Kubeconfig is a kubeconfig file; empty uses the in-cluster config.
	Kubeconfig string `yaml:"kubeconfig"`
	// EvictionDeadline is how long an eviction a PodDisruptionBudget refuses is retried. Default 10m.
	EvictionDeadline Duration `yaml:"eviction_deadline"`
	// Events writes Kubernetes Events on the pod or workload. Default true.
	Events *bool `yaml:"events"`
	// Kueue: how jobs that Kueue admits are stopped.
	Kueue Kueue `yaml:"kueue"`
	// JupyterHub, when set, stops single-user servers through the hub's
	// API; without it their pods are evicted.
	JupyterHub *JupyterHub `yaml:"jupyterhub"`
	// QPS and Burst bound the reclaimer's requests to the apiserver (a
	// token bucket, as every client-go client has; client-go's own 5 and
	// 10 persist 1,000 reclaims in 200 s). Default DefaultQPS and twice
	// that: a burst of reclaims is written as fast as the apiserver's
	// priority and fairness lets this client.
	QPS   float32 `yaml:"qps"`
	Burst int     `yaml:"burst"`
	// DRADrivers are the DRA drivers whose devices are GPUs, as the
	// exporters' --kubelet.dra-drivers: a pod's ResourceClaims allocated by
	// them hold its GPUs. Default names.DRADrivers.
	DRADrivers []string `yaml:"dra_drivers"`
}

// On says whether Kubernetes is used.
func (k Kubernetes) On() bool { return k.Enabled == nil || *k.Enabled }

// EventsOn says whether Events are written.
func (k Kubernetes) EventsOn() bool { return k.Events == nil || *k.Events }

func (k *Kubernetes) validate(c *checker) {
	c.duration("kubernetes.eviction_deadline", &k.EvictionDeadline, 10*time.Minute)
	if k.QPS == 0 {
		k.QPS = DefaultQPS
	}
	if k.Burst == 0 {
		k.Burst = 2 * int(k.QPS)
	}
	if k.QPS < 0 || k.QPS > 10000 {
		c.errorf("kubernetes.qps", "%g is not from 0 to 10000", k.QPS)
	}
	if k.Burst < 1 || float32(k.Burst) < k.QPS {
		c.errorf("kubernetes.burst", "%d must be at least 1 and at least kubernetes.qps (%g)", k.Burst, k.QPS)
	}
	if k.DRADrivers == nil {
		k.DRADrivers = names.DRADrivers
	}
	for i, d := range k.DRADrivers {
		if errs := validation.IsDNS1123Subdomain(d); len(errs) > 0 {
			c.errorf(fmt.Sprintf("kubernetes.dra_drivers[%d]", i), "%q is not a driver name: %s", d, strings.Join(errs, "; "))
		}
	}
	if k.Kubeconfig != "" {
		if !filepath.IsAbs(k.Kubeconfig) {
			k.Kubeconfig = filepath.Join(c.dir, k.Kubeconfig)
		}
		if _, err := os.Stat(k.Kubeconfig); err != nil && !c.skipSecrets {
			c.errorf("kubernetes.kubeconfig", "%v", err)
		}
	}
}
