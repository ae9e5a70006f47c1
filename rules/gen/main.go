// Command gen writes gpureclaim's Prometheus rules for a config.
//
//	go run ./rules/gen                           # defaults → stdout
//	go run ./rules/gen -config demo.yaml -o out.yml
//	go run ./rules/gen -config shards.yaml -o rules.yml -groups-per-file 32   # rules-00.yml, rules-01.yml, ...
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gpureclaim/gpureclaim/rules"
)

func main() {
	config := flag.String("config", "", "rules config (YAML); empty for the defaults")
	out := flag.String("o", "-", "where to write the rules; - for stdout")
	perFile := flag.Int("groups-per-file", 0, "write the groups into files of at most this many each (NAME-00.yml, ...), for sharded rules too large for one PrometheusRule; 0: one file")
	flag.Parse()
	c := rules.DefaultConfig()
	if *config != "" {
		var err error
		if c, err = rules.Load(*config); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
	if *perFile > 0 {
		if *out == "-" {
			fmt.Fprintln(os.Stderr, "gen: -groups-per-file writes files: give -o")
			os.Exit(2)
		}
		files, err := rules.RenderSplit(c, *perFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		base := strings.TrimSuffix(*out, ".yml")
		for i, b := range files {
			if err := os.WriteFile(fmt.Sprintf("%s-%02d.yml", base, i), b, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "gen:", err)
				os.Exit(1)
			}
		}
		return
	}
	b, err := rules.Render(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	if *out == "-" {
		os.Stdout.Write(b)
		return
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
