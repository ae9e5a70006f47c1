// Command gen writes gpureclaim's Prometheus rules for a config.
//
//	go run ./rules/gen                           # defaults → stdout
//	go run ./rules/gen -config demo.yaml -o out.yml
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpureclaim/gpureclaim/rules"
)

func main() {
	config := flag.String("config", "", "rules config (YAML); empty for the defaults")
	out := flag.String("o", "-", "where to write the rules; - for stdout")
	flag.Parse()
	c := rules.DefaultConfig()
	if *config != "" {
		var err error
		if c, err = rules.Load(*config); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
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
