#!/usr/bin/env bash
# Replays the shared trace through the defaults, the old defaults, simple
# rules, the pause history, the serving class's quiet, restore_when and a
# sweep of fixed waits with
# gpureclaim-backtest. Every figure is split into the pods a setting was
# chosen on (tuned) and the pods held apart (--report.held-apart: by the
# hash of the pod's id). Writes docs/backtest/results.md, the frontier plot
# of the fixed waits with the policies on it, and the plot of one workload
# under the defaults. Run by `make backtest`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/gpureclaim-backtest
out=docs/backtest
trace=traces/genai-pods.csv.gz
held=0.5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { go run ./hack/backtestreport "$@"; }

summary="$tmp/summary.md"
details="$tmp/details.md"
: >"$summary" >"$details"

# variant NAME TITLE RULES_CONFIG|- RECLAIMER_CONFIG|- CONTROLLER [FLAG...]
variant() {
	local name=$1 title=$2 rules=$3 policy=$4 controller=$5 rulesfile=rules/gpureclaim.rules.yml
	shift 5
	local cmd=()
	if [ "$rules" != - ]; then
		rulesfile="$tmp/$name.rules.yml"
		go run ./rules/gen -config "$rules" -o "$rulesfile"
		cmd+=("go run ./rules/gen -config ${rules/#$tmp\//} -o $name.rules.yml &&")
	fi
	# A policy restored on demand spends cold starts: beside it, the bound
	# at the same cold starts and the earliest a warned reclaim acts.
	case " $* " in *" --history.restore-on-demand "*) set -- "$@" --report.bound-delay=25m ;; esac
	local args=(--history.trace="$trace" --rules="$rulesfile" --history.controller="$controller" --format=json --report.held-apart="$held" "$@")
	[ "$policy" != - ] && args+=(--config.file="$out/$policy")
	echo "running: $title" >&2
	"$bin" "${args[@]}" >"$tmp/$name.json"
	cmd+=("gpureclaim-backtest --history.trace=$trace --rules=${rulesfile/#$tmp\//} --report.held-apart=$held")
	[ "$controller" != "" ] && cmd+=("--history.controller=$controller")
	[ "$policy" != - ] && cmd+=("--config.file=$out/$policy")
	[ $# -gt 0 ] && cmd+=("$@")
	report markdown "$tmp/$name.json" >"$tmp/$name.md"
	sed -n '3,5p' "$tmp/$name.md" | sed "s/^| \*\*all\*\* |/| $title |/; s/^| tuned |/| $title, tuned |/; s/^| held apart |/| $title, held apart |/" >>"$summary"
	{
		echo "### $title"
		echo
		echo '```sh'
		echo "${cmd[*]}"
		echo '```'
		echo
		cat "$tmp/$name.md"
		echo
	} >>"$details"
}

variant old "old defaults" "$out/old.rules.yaml" old.reclaimer.yml ""
variant avg "avg < 5% for 10m, act at 15m" "$out/avg10-act15.rules.yaml" act-at-once.reclaimer.yml ""
variant max "max < 1% for 30m" "$out/max1-30m.rules.yaml" act-at-once.reclaimer.yml ""
variant new "**defaults**" - - Deployment
variant restore "defaults + restore_when" - - Deployment --history.restore-on-demand
variant pauses "defaults + pause history" "$out/pauses.rules.yaml" - Deployment --history.restore-on-demand
# The shipped classes: the trace's pods are Deployments, class serving,
# which waits 90m or, quiet, 10m (rules/classes.yaml).
variant quiet "serving class, quiet" rules/classes.yaml - Deployment --history.restore-on-demand

# The fixed waits: the defaults but for idle.reclaim_after (the grace,
# 15m, comes on top); 45m is the defaults.
waits=()
for m in 15 30 45 60 75 90 105 135 165; do
	if [ "$m" = 45 ]; then
		waits+=("wait:$((m + 15))m=$tmp/restore.json")
		continue
	fi
	printf 'idle: {reclaim_after: %sm}\n' "$m" >"$tmp/wait-$m.yaml"
	variant "wait-$m" "fixed wait: reclaim_after ${m}m" "$tmp/wait-$m.yaml" - Deployment --history.restore-on-demand
	waits+=("wait:$((m + 15))m=$tmp/wait-$m.json")
done
frontier=$(report frontier -o "$out/frontier.svg" -title "Fixed waits (reclaim_after + grace) and policies on the shared trace" "${waits[@]}" \
	"policy:old defaults=$tmp/old.json" "policy:defaults=$tmp/new.json" "policy:pause history=$tmp/pauses.json" "policy:quiet=$tmp/quiet.json")
# The same runs against their cost with restore on demand: every restore
# is a cold start the returning work waits for (the fixed waits restore on
# demand; the old defaults evict, which nothing restores).
coldstarts=$(report frontier -o "$out/frontier-cold-starts.svg" -cold-starts 1 -title "Fixed waits and policies, restored on demand: freed against cold starts" "${waits[@]}" \
	"policy:defaults=$tmp/restore.json" "policy:pause history=$tmp/pauses.json" "policy:quiet=$tmp/quiet.json")

# The most any policy could free: one that knows every pause's length.
bounds=$("$bin" --history.trace="$trace" --history.controller=Deployment --report.held-apart="$held" \
	--report.bounds --bound.delays=0s,15m,25m,30m,45m,60m,105m --bound.cold-starts=0.5,1,1.18,2,4.91)

# The most quiet could free with its share chosen on the pods it is judged
# on, beside the bound at quiet's delay.
ceiling_args=(--history.trace="$trace" --history.controller=Deployment --report.held-apart="$held"
	--report.bounds --bound.delays=25m --bound.cold-starts=0.7,1
	--ceiling.config=rules/classes.yaml --ceiling.class=serving --ceiling.unit-windows=1h,2h,4h,6h,8h)
ceiling=$("$bin" "${ceiling_args[@]}")

plot=${PLOT_WORKLOAD:-6ebc62069627eabf9bf6659d9a78d228}
"$bin" --history.trace="$trace" --rules=rules/gpureclaim.rules.yml --history.controller=Deployment \
	--format=json --plot.workload="$plot" --plot.file="$out/plot.svg" >/dev/null

{
	echo "<!-- Generated by hack/backtest.sh (make backtest); do not edit. -->"
	echo
	echo "Every variant on all 99 pods, on the pods its settings were chosen on (tuned), and on"
	echo "the pods held apart (\`--report.held-apart=$held\`: by the FNV-1a hash of the pod's id)."
	echo "Beside each restored on demand, the bound (\`--report.bound-delay=25m\`): what a policy that"
	echo "knows every pause's length frees without regret, acting 25 minutes into the pauses it picks"
	echo "(the earliest a warned reclaim acts) at the same cold starts, and the share of it freed."
	echo
	echo "| variant | workloads | held GPU-min | idle GPU-min | reclaimable | freed GPU-min | recovered | freed w/o regret | warnings | reclaims | regret | restored on demand | cold starts | by action | bound: freed w/o regret |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	cat "$summary"
	echo
	echo "## The frontier"
	echo
	echo "Freed without regret, as a share of the reclaimable GPU-minutes ([frontier.svg](frontier.svg)):"
	echo
	echo "$frontier"
	echo
	echo "Against cold starts per workload-day, with restore on demand ([frontier-cold-starts.svg](frontier-cold-starts.svg)):"
	echo
	echo "$coldstarts"
	echo
	echo "## The bound"
	echo
	echo "The most a policy that knows every pause's length frees without regret, acting a fixed delay into the"
	echo "pauses it picks, within a budget of cold starts per workload-day (\`--report.bounds\`):"
	echo
	echo "$bounds"
	echo
	echo "## Quiet's ceiling"
	echo
	echo "The most the serving class's quiet frees when its \`unit_busy_below\` is chosen on the very pods it is"
	echo "judged on, per unit window, within a budget of cold starts, beside the bound at its delay; the share"
	echo "chosen and the cold starts it spent in brackets:"
	echo
	echo '```sh'
	echo "gpureclaim-backtest ${ceiling_args[*]}"
	echo '```'
	echo
	echo "$ceiling"
	echo
	cat "$details"
	echo "The plot ([plot.svg](plot.svg)) is workload \`$plot\` under the defaults."
} >"$out/results.md"
echo "wrote $out/results.md, $out/frontier.svg, $out/frontier-cold-starts.svg and $out/plot.svg" >&2
