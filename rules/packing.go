package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// packingGroup names the group that measures owners over the packing
// window: it runs every packing.step, not every evaluation.
const packingGroup = "gpureclaim.packing"

// packKey is what a packing record is kept per: a whole GPU's one owner.
const packKey = "uuid, gpu_uuid, " + ownerLabels + ", keep, node, model"

// packingRules measure each whole GPU's one owner over the packing window
// and say which need at most half a GPU: its activity quantile against the
// compute cap, or its memory peak with headroom against the memory cap,
// whichever binds. The advisor checks a plan on the series; these rules
// only find the candidates and tell their owners.
func packingRules(c Config) []Rule {
	pk := c.Packing
	in := c.inputs()
	rs := []Rule{
		{Record: names.RecPackActivity, Expr: Expr(fmt.Sprintf("quantile_over_time(%s, %s[%s:%s])", num(pk.Quantile), names.RecOwnerActivity, pk.Window, pk.Step))},
		// Every sample: a memory spike between steps is what overflows a shared GPU.
		{Record: names.RecPackMemory, Expr: Expr(fmt.Sprintf("max_over_time(%s[%s])", names.RecOwnerMemory, pk.Window))},
		{Record: names.RecPackHeld, Expr: Expr(fmt.Sprintf("count_over_time(%s[%s:%s]) * %s", names.RecOwnerMemory, pk.Window, pk.Step, num(time.Duration(pk.Step).Seconds())))},
		{Record: names.RecPackNeed, Expr: Expr(fmt.Sprintf(`topk by (%s) (1,
    label_replace(max by (%s) (%s) / %s, "binds", "compute", "", "")
  or
    label_replace(
        max by (%s) (%s) * %s
      / on (uuid) group_left ()
        (max by (uuid) (%s) * %s),
      "binds", "memory", "", "")
)
and on (%s) (%s)
`, packKey, packKey, names.RecPackActivity, num(pk.ComputeCap), packKey, names.RecPackMemory, num(1+pk.Headroom), in.memTotal, num(pk.MemoryCap), packKey, c.evidenced()))},
	}
	if in.rightsizing {
		rs = append(rs, Rule{Record: names.RecPackMIGFit, Expr: Expr(c.migFit())})
	}
	// Packing n owners whose needs sum to s frees at most n - ceil(s) GPUs.
	rs = append(rs, Rule{Record: names.RecFleetPackFreed, Expr: Expr(fmt.Sprintf("count(%s) - ceil(sum(%s)) or vector(0)", packable, packable))})
	return append(rs, forEachAudience([]Rule{c.packable()})...)
}

// packable selects the owners who need at most half a GPU, are not kept,
// and hold the GPU now: the window remembers a holder for days after it
// is gone.
var packable = fmt.Sprintf(`%s{keep!="true"} <= %s and on (uuid, %s, keep) %s`, names.RecPackNeed, num(names.PackableNeed), ownerLabels, names.RecHeld)

// evidenced selects the owners who held their GPU for packing.evidence of the window.
func (c Config) evidenced() string {
	return fmt.Sprintf("max by (%s) (%s) >= %d", packKey, names.RecPackHeld, int64(time.Duration(c.Packing.Evidence).Seconds()))
}

// migSlices are the sizing MIG profiles of the GPUs that make seven
// compute slices and eight memory slices (A100, H100, H200, B200): each
// profile's compute slices and its share of the memory.
var migSlices = []struct {
	slices int
	memory float64
}{{1, 1.0 / 8}, {2, 2.0 / 8}, {3, 4.0 / 8}, {4, 4.0 / 8}}

// migFit is the fewest compute slices of a MIG profile that hold a whole
// GPU's owner: its activity quantile within the cap on those slices, its
// memory peak with headroom within the profile's memory. Only GPUs that
// can make MIG instances and are not in MIG mode (the exporter reports
// gpureclaim_gpu_mig_mode_enabled 0), and not the A30, which makes four
// slices of a quarter each.
func (c Config) migFit() string {
	pk := c.Packing
	in := c.inputs()
	compute := fmt.Sprintf("max by (%s) (%s) / %s", packKey, names.RecPackActivity, num(pk.ComputeCap))
	memory := fmt.Sprintf("max by (%s) (%s) * %s / on (uuid) group_left () max by (uuid) (%s)", packKey, names.RecPackMemory, num(1+pk.Headroom), in.memTotal)
	var fits []string
	for _, p := range migSlices {
		fits = append(fits, fmt.Sprintf("    ((%s <= %s) and on (%s) (%s <= %s)) * 0 + %d", compute, num(float64(p.slices)/7), packKey, memory, num(p.memory), p.slices))
	}
	return fmt.Sprintf(`min by (%s) (
%s
)
and on (%s) (%s)
and on (gpu_uuid) (gpureclaim_gpu_mig_mode_enabled == 0)
unless on (uuid) %s{model=~".*A30.*"}
`, packKey, strings.Join(fits, "\nor\n"), packKey, c.evidenced(), in.unitInfo)
}

// packable is GPUPackable: it tells the owner the exact change.
func (c Config) packable() Rule {
	pk := c.Packing
	quantile := `{{ with ` + c.ofUnit("max("+names.RecPackActivity, ")") + ` | query }}{{ . | first | value | humanizePercentage }}{{ end }}`
	peak := `{{ with ` + c.ofUnit("max("+names.RecPackMemory, ")") + ` | query }}{{ . | first | value | humanize1024 }}B{{ end }}`
	limit := `{{ with ` + c.ofUnit("max("+names.RecPackMemory, ") * "+num(1+pk.Headroom)) + ` | query }}{{ . | first | value | humanize1024 }}B{{ end }}`
	return Rule{
		Alert:  names.AlertPackable,
		Expr:   Expr(packable),
		For:    pk.For.String(),
		Labels: map[string]string{"severity": "info", "action": "notify"},
		Annotations: c.annotations("gpupackable",
			`GPU `+"{{ $labels.uuid }} on {{ $labels.node }}"+` could be shared`,
			`Over the last `+pk.Window.String()+`, `+whoHolds+` used `+quantile+` of GPU {{ $labels.uuid }} (its p`+num(pk.Quantile*100)+` activity) and at most `+peak+` of its memory: it needs {{ $value | humanizePercentage }} of a GPU ({{ $labels.binds }} binds), so two like it fit on one. `+
				`{{ if $labels.pod }}Ask for `+"`"+pk.SharedResource+`: 1`+"`"+` instead of `+"`nvidia.com/gpu: 1`"+`, with its memory capped at `+limit+` (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT under MPS, the framework's memory fraction under time-slicing)`+
				`{{ else if $labels.slurm_job }}Ask for a GPU shard (`+"`--gres=shard:1`"+` where the cluster has shards) instead of a whole GPU, with its memory capped at `+limit+
				`{{ else }}Run it on a shared GPU (MPS, with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT at `+limit+`){{ end }}.`+
				`{{ with `+c.ofUnit("min("+names.RecPackMIGFit, ")")+` | query }} Or, isolated, it fits a {{ . | first | value }}g MIG slice of this GPU (`+"`nvidia.com/mig-{{ . | first | value }}g.<memory>gb`"+`, as the GPU's profiles name it).{{ end }}`+
				` gpureclaim-advisor plans which GPUs to share and replays the plan on the history.`,
			c.unitDashboard()),
	}
}
