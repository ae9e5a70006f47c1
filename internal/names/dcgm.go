package names

// NVIDIA dcgm-exporter's series, as its counter files and exposition name
// them (dcgm-exporter 4.x): the fields gpureclaim reads and the labels it
// relabels. The rules read them for source: dcgm, the backtest reads an
// export of them, and the simulator can serve them.
const (
	DCGMSMActive   = "DCGM_FI_PROF_SM_ACTIVE" // ratio, DCP profiling
	DCGMGPUUtil    = "DCGM_FI_DEV_GPU_UTIL"   // percent; whole GPUs only
	DCGMFBUsed     = "DCGM_FI_DEV_FB_USED"    // MiB
	DCGMFBFree     = "DCGM_FI_DEV_FB_FREE"    // MiB
	DCGMFBReserved = "DCGM_FI_DEV_FB_RESERVED"

	DCGMLabelGPU        = "gpu" // the GPU's index
	DCGMLabelUUID       = "UUID"
	DCGMLabelModel      = "modelName"
	DCGMLabelHostname   = "hostname" // Hostname before 4.5.3-4.8.2
	DCGMLabelOldHost    = "Hostname"
	DCGMLabelMIGID      = "GPU_I_ID"
	DCGMLabelMIGProfile = "GPU_I_PROFILE"
	// The DRA labels dcgm-exporter (4.x) sets on a unit a pod holds
	// through a ResourceClaim, beside its pod mapping.
	DCGMLabelDRAClaimNamespace = "dra_claim_namespace"
	DCGMLabelDRAClaimName      = "dra_claim_name"
	DCGMLabelDRADriver         = "dra_driver_name"
	DCGMLabelDRAPool           = "dra_pool_name"
	DCGMLabelDRADevice         = "dra_device_name"
	// DCGMExported prefixes the pod mapping's labels when the scrape does
	// not honor them (exported_pod, ...): the target's own labels win.
	DCGMExported = "exported_"

	// DCGMDefaultJob is the job of the GPU Operator's ServiceMonitor.
	DCGMDefaultJob = "nvidia-dcgm-exporter"
)

// DCGMFields are the fields gpureclaim reads, in the order it reads them.
var DCGMFields = []string{DCGMSMActive, DCGMGPUUtil, DCGMFBUsed, DCGMFBFree, DCGMFBReserved}

// DCGMMIGUUID is the uuid gpureclaim gives a MIG instance that
// dcgm-exporter names by its GPU's UUID and its GPU instance id.
func DCGMMIGUUID(gpuUUID, instanceID string) string { return gpuUUID + DCGMMIGSeparator + instanceID }

// DCGMMIGSeparator joins a GPU's UUID and a GPU instance id.
const DCGMMIGSeparator = "/gi"
