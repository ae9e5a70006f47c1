// Command nvmlstub builds a stand-in libnvidia-ml.so.1 for measuring the
// exporter's own footprint on a machine without an NVIDIA driver: eight
// H100-shaped GPUs that answer the few calls a sample needs (count,
// handles, UUID, name, memory, power, energy, temperature, utilization, MIG
// mode, minor number, no processes) and NOT_SUPPORTED to every other
// function go-nvml's nvml.h declares. It measures nothing itself; see
// hack/exporter-rss.sh --node.
//
//	go run ./hack/nvmlstub -o DIR   # writes DIR/libnvidia-ml.so.1 (needs cc)
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// answered are the calls the stub answers; every other one is NOT_SUPPORTED.
const answered = `
#include <stdio.h>
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned int gpu, memory; } util_t;
static int devs[8];
static int idx(void *d) { return (int *)d - devs; }
const char *nvmlErrorString(int r) { return "nvmlstub"; }
int nvmlInit_v2(void) { return 0; }
int nvmlInit(void) { return 0; }
int nvmlInitWithFlags(unsigned f) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned *c) { *c = 8; return 0; }
int nvmlDeviceGetCount(unsigned *c) { *c = 8; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) { if (i >= 8) return 2; *d = &devs[i]; return 0; }
int nvmlDeviceGetHandleByIndex(unsigned i, void **d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }
int nvmlDeviceGetUUID(void *d, char *s, unsigned n) { snprintf(s, n, "GPU-00000000-0000-4000-8000-00000000000%d", idx(d)); return 0; }
int nvmlDeviceGetName(void *d, char *s, unsigned n) { snprintf(s, n, "NVIDIA H100 80GB HBM3"); return 0; }
int nvmlDeviceGetMemoryInfo(void *d, mem_t *m) { m->total = 85899345920ULL; m->used = 1ULL << 30; m->free = m->total - m->used; return 0; }
int nvmlSystemGetDriverVersion(char *s, unsigned n) { snprintf(s, n, "550.54.15"); return 0; }
int nvmlSystemGetNVMLVersion(char *s, unsigned n) { snprintf(s, n, "12.550.54.15"); return 0; }
int nvmlSystemGetCudaDriverVersion(int *v) { *v = 12040; return 0; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return 0; }
int nvmlDeviceGetMinorNumber(void *d, unsigned *m) { *m = idx(d); return 0; }
int nvmlDeviceGetPowerUsage(void *d, unsigned *p) { *p = 70000; return 0; }
int nvmlDeviceGetTotalEnergyConsumption(void *d, unsigned long long *e) { *e = 1000000; return 0; }
int nvmlDeviceGetTemperature(void *d, int s, unsigned *t) { *t = 35; return 0; }
int nvmlDeviceGetUtilizationRates(void *d, util_t *u) { u->gpu = 0; u->memory = 0; return 0; }
int nvmlDeviceGetMigMode(void *d, unsigned *c, unsigned *p) { *c = 0; *p = 0; return 0; }
int nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *c, void *p) { *c = 0; return 0; }
int nvmlDeviceGetGraphicsRunningProcesses_v3(void *d, unsigned *c, void *p) { *c = 0; return 0; }
int nvmlDeviceGetMPSComputeRunningProcesses_v3(void *d, unsigned *c, void *p) { *c = 0; return 0; }
`

var declared = regexp.MustCompile(`nvmlReturn_t DECLDIR (nvml[A-Za-z0-9_]+)`)

func main() {
	out := flag.String("o", ".", "Where libnvidia-ml.so.1 goes.")
	flag.Parse()
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml").Output()
	if err != nil {
		log.Fatalf("finding go-nvml: %v", err)
	}
	h, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "pkg", "nvml", "nvml.h"))
	if err != nil {
		log.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`int (nvml[A-Za-z0-9_]+)\(`).FindAllStringSubmatch(answered, -1) {
		defined[m[1]] = true
	}
	var names []string
	for _, m := range declared.FindAllStringSubmatch(string(h), -1) {
		if !defined[m[1]] {
			defined[m[1]] = true
			names = append(names, m[1])
		}
	}
	sort.Strings(names)
	var src strings.Builder
	src.WriteString(answered)
	for _, n := range names {
		fmt.Fprintf(&src, "int %s() { return 3; }\n", n) // NVML_ERROR_NOT_SUPPORTED
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	c := filepath.Join(*out, "nvmlstub.c")
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	cc := exec.Command("cc", "-shared", "-fPIC", "-O1", "-o", filepath.Join(*out, "libnvidia-ml.so.1"), c)
	cc.Stdout, cc.Stderr = os.Stdout, os.Stderr
	if err := cc.Run(); err != nil {
		log.Fatalf("cc: %v", err)
	}
}
