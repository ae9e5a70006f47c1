package backtest

import "time"

// DefaultColdStarts is how long a restored workload of each kind takes to
// serve again once its restore is asked: its pods scheduled, its image
// started, and what it loads before it works (an inference server's model
// weights, a training job's last checkpoint, a notebook's server; not the
// notebook's kernel state, which is lost). The returning work waits for
// it. Kinds not listed (bare pods, processes) are not restored.
var DefaultColdStarts = map[string]time.Duration{
	"Deployment": 3 * time.Minute, "StatefulSet": 3 * time.Minute, "InferenceService": 3 * time.Minute,
	"LeaderWorkerSet": 5 * time.Minute, "RayCluster": 5 * time.Minute,
	"Notebook": time.Minute, "JupyterHub server": time.Minute,
	"Job": 5 * time.Minute, "RayJob": 5 * time.Minute, "PyTorchJob": 5 * time.Minute,
	"TrainJob": 5 * time.Minute, "JobSet": 5 * time.Minute,
}
