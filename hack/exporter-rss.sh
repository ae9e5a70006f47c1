#!/usr/bin/env bash
# Resident memory of the exporter sampling the simulated demo node every
# second (gpureclaim-exporter-sim: the exporter's code and the simulator).
# Usage: hack/exporter-rss.sh [minutes]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
make -s build
port=19848
bin/gpureclaim-exporter-sim --simulate=demo --simulate.speed=60 --sample.interval=1s \
	--web.listen-address=127.0.0.1:$port --log.level=warn &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
rss() { awk '/VmRSS/ {printf "%.1f MiB", $2/1024}' /proc/$pid/status; }
sleep 5
echo "after 5 s: $(rss)"
for m in $(seq 1 "$minutes"); do
	for _ in $(seq 60); do curl -s -o /dev/null 127.0.0.1:$port/metrics; sleep 1; done
	echo "after $m min ($(( m * 60 )) samples, $(( m * 60 )) scrapes): $(rss)"
done
