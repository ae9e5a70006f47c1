// Command gen writes gpureclaim's Grafana dashboards into a folder.
//
//	go run ./dashboards/gen -o dashboards
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpureclaim/gpureclaim/dashboards"
)

func main() {
	out := flag.String("o", "dashboards", "folder to write the dashboards into")
	flag.Parse()
	all, err := dashboards.All()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for name, d := range all {
		b, err := dashboards.Marshal(d)
		if err == nil {
			err = os.WriteFile(filepath.Join(*out, name), b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
