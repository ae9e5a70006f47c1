#!/usr/bin/env bash
# Resident memory of the exporter sampling every second and scraped every
# second.
#   hack/exporter-rss.sh [minutes]          gpureclaim-exporter-sim on the
#                                           simulated demo node (the exporter's
#                                           code and the simulator)
#   hack/exporter-rss.sh --node [minutes]   gpureclaim-exporter, what a GPU node
#                                           runs, on a stand-in libnvidia-ml.so.1
#                                           (hack/nvmlstub: 8 GPUs); also its
#                                           RSS without the library's pages
# Default 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
node=false
if [ "${1:-}" = --node ]; then
	node=true
	shift
fi
minutes=${1:-10}
make -s build
port=19848
if $node; then
	stub=$(mktemp -d)
	trap 'rm -rf "$stub"' EXIT
	go run ./hack/nvmlstub -o "$stub"
	LD_LIBRARY_PATH=$stub bin/gpureclaim-exporter --sample.interval=1s --path.procfs= --kubelet.pod-resources-socket= \
		--web.listen-address=127.0.0.1:$port --log.level=warn &
else
	bin/gpureclaim-exporter-sim --simulate=demo --simulate.speed=60 --sample.interval=1s \
		--web.listen-address=127.0.0.1:$port --log.level=warn &
fi
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "${stub:-}"' EXIT
rss() {
	awk '/VmRSS/ {printf "%.1f MiB", $2/1024}' /proc/$pid/status
	if $node; then
		# The library's own resident pages, which a real driver's replace.
		awk '/^[0-9a-f]+-[0-9a-f]+ / {lib = ($6 ~ /libnvidia-ml/)} /^Rss:/ {if (lib) kb += $2; else own += $2}
			END {printf " (%.1f MiB without libnvidia-ml)", own/1024}' /proc/$pid/smaps
	fi
}
sleep 5
echo "after 5 s: $(rss)"
for m in $(seq 1 "$minutes"); do
	for _ in $(seq 60); do curl -s -o /dev/null 127.0.0.1:$port/metrics; sleep 1; done
	echo "after $m min ($(( m * 60 )) samples, $(( m * 60 )) scrapes): $(rss)"
done
