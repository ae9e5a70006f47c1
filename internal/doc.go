// Package internal holds the code gpureclaim's commands share. Its layout
// says what each package is for:
//
//   - internal/<name>: libraries the shipped binaries link (names, nodeapi,
//     trace, httpserver, logging, mig, procfs, podresources, podmeta, kubeapi, loop,
//     ruleeval, cli);
//   - internal/sim/: the simulated world the demo, the simulated exporter and
//     the tests run on (nvmlsim: GPUs behind NVML; cluster: a local
//     Kubernetes control plane; stack: the whole system on loopback);
//   - internal/testkit/: helpers only tests import (fake Slack, a fake clock,
//     Prometheus, Alertmanager, apiserver and single-node Slurm harnesses, the
//     workload controllers, the pinned tools, the METRICS.md check).
//
// Nothing here imports the components (exporter, reclaimer, rules,
// dashboards): arrows run from them into internal, never back.
package internal
