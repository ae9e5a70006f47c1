package rules

import (
	"fmt"
	"strings"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// Sources the rules can read.
const (
	// SourceGPUreclaim is gpureclaim's own exporter.
	SourceGPUreclaim = "gpureclaim"
	// SourceDCGM is NVIDIA's dcgm-exporter, as the GPU Operator installs
	// it, with its Kubernetes pod mapping. Written against dcgm-exporter
	// 4.5.x (DCGM 4.x); the hostname label was Hostname before 4.5.3-4.8.2.
	SourceDCGM = "dcgm"
)

// inputs are the series the unit rules read: the exporter's own metrics,
// or the records that translate dcgm-exporter's into them.
type inputs struct {
	smActive, utilization, memUsed, memTotal, unitInfo, ownerInfo, migSlices string
	// rightsizing: the exporter's table of the MIG profiles each GPU can
	// make, which dcgm-exporter does not export.
	rightsizing bool
	// kill: a node agent that can end a process exists.
	kill bool
	// holderSMUtil and holderProcesses are each holder's own activity on a
	// unit (NVML per-process utilization) and its processes there; empty
	// where the source has none (dcgm-exporter).
	holderSMUtil, holderProcesses string
	// unattributed counts a unit's processes no holder can be given; a
	// unit with any is not judged per holder.
	unattributed string
}

func (c Config) inputs() inputs {
	if c.Source == SourceDCGM {
		return inputs{
			smActive: dcgmSMActive, utilization: dcgmUtilization, memUsed: dcgmMemUsed, memTotal: dcgmMemTotal,
			unitInfo: dcgmUnitInfo, ownerInfo: dcgmOwnerInfo, migSlices: dcgmMIGSlices,
		}
	}
	return inputs{
		smActive: "gpureclaim_unit_sm_active_ratio", utilization: "gpureclaim_unit_utilization_ratio",
		memUsed: "gpureclaim_unit_memory_used_bytes", memTotal: "gpureclaim_unit_memory_total_bytes",
		unitInfo: "gpureclaim_unit_info", ownerInfo: "gpureclaim_unit_owner_info", migSlices: "gpureclaim_mig_instance_slices",
		rightsizing: true, kill: true,
		holderSMUtil: "gpureclaim_unit_owner_sm_utilization_ratio", holderProcesses: "gpureclaim_unit_owner_processes",
		unattributed: "gpureclaim_unit_unattributed_processes",
	}
}

// Records that stand for the exporter's unit metrics when the source is
// dcgm-exporter. Their labels are the exporter's: a MIG instance's uuid is
// its GPU's UUID and its GPU instance id ("GPU-…/gi3"), since dcgm-exporter
// does not name MIG devices by their own UUID.
const (
	dcgmSMActive    = "uuid:gpureclaim_unit_sm_active_ratio:dcgm"
	dcgmUtilization = "uuid:gpureclaim_unit_utilization_ratio:dcgm"
	dcgmMemUsed     = "uuid:gpureclaim_unit_memory_used_bytes:dcgm"
	dcgmMemTotal    = "uuid:gpureclaim_unit_memory_total_bytes:dcgm"
	dcgmUnitInfo    = "uuid:gpureclaim_unit_info:dcgm"
	dcgmOwnerInfo   = "uuid:gpureclaim_unit_owner_info:dcgm"
	dcgmMIGSlices   = "uuid:gpureclaim_mig_instance_slices:dcgm"
)

// dcgm-exporter's fields, as its counter files name them.
const (
	dcgmFieldSMActive   = names.DCGMSMActive
	dcgmFieldGPUUtil    = names.DCGMGPUUtil // percent
	dcgmFieldFBUsed     = names.DCGMFBUsed  // MiB
	dcgmFieldFBFree     = names.DCGMFBFree  // MiB
	dcgmFieldFBReserved = names.DCGMFBReserved
)

const mib = 1 << 20

// migProfileSlices are the compute slices of each GPU instance profile
// size (1g … 7g), read off dcgm-exporter's GPU_I_PROFILE label.
var migProfileSlices = []int{1, 2, 3, 4, 7}

// dcgmFields is every field the rules read, relabelled once: the field's
// name in field, and the exporter's unit labels (uuid, gpu_uuid, node,
// kind, mig_profile, model, gpu_index) and owner labels (namespace, pod,
// container, and the claim of a pod that holds the unit through DRA).
const dcgmFields = "uuid:dcgm_fields:unit_labels"

// dcgmRelabel selects the fields on the configured job and relabels them.
// A MIG instance's uuid is its GPU's UUID and its GPU instance id.
func (c Config) dcgmRelabel() string {
	fields := strings.Join(names.DCGMFields, "|")
	sel := func(m string) string { return fmt.Sprintf(`{__name__=~%q,job=%q,%s}`, fields, c.DCGM.Job, m) }
	whole := fmt.Sprintf(`label_replace(label_replace(%s, "uuid", "$1", %q, "(.+)"), "kind", %q, "", "")`,
		sel(names.DCGMLabelMIGID+`=""`), names.DCGMLabelUUID, names.KindGPU)
	mig := fmt.Sprintf(`label_replace(label_replace(label_join(%s, "uuid", %q, %q, %q), "kind", %q, "", ""), "mig_profile", "$1", %q, "(.+)")`,
		sel(names.DCGMLabelMIGID+`!=""`), names.DCGMMIGSeparator, names.DCGMLabelUUID, names.DCGMLabelMIGID, names.KindMIG, names.DCGMLabelMIGProfile)
	e := "(\n    " + whole + "\n  or\n    " + mig + "\n)"
	for _, r := range [][2]string{{"field", "__name__"}, {"gpu_uuid", names.DCGMLabelUUID}, {"model", names.DCGMLabelModel}, {"gpu_index", names.DCGMLabelGPU}} {
		e = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.+)")`, e, r[0], r[1])
	}
	// Before dcgm-exporter 4.5.3-4.8.2 the node's name was in Hostname.
	e = fmt.Sprintf(`label_join(%s, "node", "", %q, %q)`, e, names.DCGMLabelHostname, names.DCGMLabelOldHost)
	// A pod that holds the unit through DRA: its claim, as the exporter
	// names it.
	for _, r := range [][2]string{{names.LabelClaimNamespace, names.DCGMLabelDRAClaimNamespace}, {names.LabelClaim, names.DCGMLabelDRAClaimName}} {
		e = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.+)")`, e, r[0], r[1])
	}
	if !c.DCGM.HonorLabels {
		// Without honor_labels the target's pod, namespace and container
		// (dcgm-exporter's own) win, and the pod mapping's move to exported_*:
		// a unit no pod holds has no exported_pod.
		for _, l := range []string{names.LabelPod, names.LabelNamespace, names.LabelContainer} {
			e = fmt.Sprintf(`label_replace(%s, %q, "$1", %q, "(.*)")`, e, l, names.DCGMExported+l)
		}
	}
	return e
}

func by(labels, expr string) string { return fmt.Sprintf("max by (%s) (%s)", labels, expr) }

func field(name string, more ...string) string {
	return fmt.Sprintf("%s{field=%q%s}", dcgmFields, name, strings.Join(more, ""))
}

// dcgmRules translate dcgm-exporter's series into the exporter's unit
// metrics; the unit rules after them read the translation.
func dcgmRules(c Config) []Rule {
	if c.Source != SourceDCGM {
		return nil
	}
	var slices []string
	for _, n := range migProfileSlices {
		slices = append(slices, fmt.Sprintf("%s * 0 + %d", by("uuid, gpu_uuid", field(dcgmFieldFBUsed, `,kind="mig",mig_profile=~"`+fmt.Sprint(n)+`g\\..*"`)), n))
	}
	used := by("uuid, gpu_uuid", field(dcgmFieldFBUsed))
	return []Rule{
		{Record: dcgmFields, Expr: Expr(by("uuid, gpu_uuid, field, node, kind, mig_profile, model, gpu_index, namespace, pod, container, claim_namespace, claim", c.dcgmRelabel()) + "\n")},
		{Record: dcgmSMActive, Expr: Expr(by("uuid, gpu_uuid", field(dcgmFieldSMActive)))},
		{Record: dcgmUtilization, Expr: Expr(by("uuid, gpu_uuid", field(dcgmFieldGPUUtil)) + " / 100")},
		{Record: dcgmMemUsed, Expr: Expr(fmt.Sprintf("%s * %d", used, mib))},
		{Record: dcgmMemTotal, Expr: Expr(fmt.Sprintf("(\n    %s\n  + on (uuid, gpu_uuid)\n    %s\n  + on (uuid, gpu_uuid)\n    (%s or %s * 0)\n) * %d\n",
			used, by("uuid, gpu_uuid", field(dcgmFieldFBFree)), by("uuid, gpu_uuid", field(dcgmFieldFBReserved)), used, mib))},
		{Record: dcgmUnitInfo, Expr: Expr(by("uuid, gpu_uuid, node, kind, mig_profile, model, gpu_index", field(dcgmFieldFBUsed)) + " * 0 + 1")},
		{Record: dcgmMIGSlices, Expr: Expr(strings.Join(slices, "\nor\n") + "\n")},
		{Record: dcgmOwnerInfo, Expr: Expr(by("uuid, gpu_uuid, namespace, pod, container, claim_namespace, claim", field(dcgmFieldFBUsed, `,pod!=""`)) + " * 0 + 1")},
	}
}
