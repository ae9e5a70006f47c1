#!/usr/bin/env bash
# On a node with a real NVIDIA GPU: run the exporter for about a minute while
# a PyTorch matmul loop loads GPU 0 for 20 s, save every scrape, and report
# whether SM activity read high under load and near 0 at rest, and what the
# NVML calls cost. Changes no GPU setting.
#   make device-check            (OUT=folder for the scrapes, default ./out/device-check)
# Needs bin/gpureclaim-exporter and bin/nvmltime (built here when Go is present)
# and python3 with torch for the load.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/device-check}
mkdir -p "$OUT/scrapes"
if command -v go >/dev/null; then
	make -s build
	CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -o bin/nvmltime ./hack/nvmltime
fi
nvidia-smi -L | tee "$OUT/nvidia-smi.txt"
bin/nvmltime | tee "$OUT/nvml-call-times.txt"

port=19849
bin/gpureclaim-exporter --sample.interval=1s --web.listen-address=127.0.0.1:$port \
	--kubelet.pod-resources-socket= > "$OUT/exporter.log" 2>&1 &
exp=$!
trap 'kill $exp 2>/dev/null || true' EXIT
sleep 3

python3 - > "$OUT/load.log" 2>&1 <<'PY' &
import time, torch
time.sleep(10)                          # 10 s at rest first
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 20                  # 20 s of load
n = 0
while time.time() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize(); n += 50
print("matmuls", n)
PY
load=$!

for i in $(seq -w 1 60); do
	curl -s 127.0.0.1:$port/metrics > "$OUT/scrapes/$i.prom" || true
	sleep 1
done
wait $load || true

# SM activity of GPU 0's first unit, per scrape: seconds 15-28 are under load,
# 45-60 at rest after it.
sm() { grep -h '^gpureclaim_unit_sm_active_ratio' "$@" | awk '{print $2}' | sort -g; }
load_min=$(for i in $(seq 15 28); do f=$OUT/scrapes/$(printf %02d $i).prom; sm "$f" | tail -1; done | sort -g | head -1)
rest_max=$(for i in $(seq 45 60); do f=$OUT/scrapes/$(printf %02d $i).prom; sm "$f" | tail -1; done | sort -g | tail -1)
{
	echo "SM activity under load (lowest busiest-unit reading, s15-28): $load_min  (want > 0.8)"
	echo "SM activity at rest    (highest reading, s45-60):              $rest_max  (want near 0)"
	grep -h 'gpureclaim_exporter_collector_duration_seconds' "$OUT/scrapes/30.prom" || true
} | tee "$OUT/summary.txt"
