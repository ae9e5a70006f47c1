// Command gen renders the Helm chart into deploy/manifests and its values
// into the table of the chart's README.
//
//	go run ./deploy/gen -helm bin/helm -o deploy/manifests
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpureclaim/gpureclaim/deploy"
)

func main() {
	helm := flag.String("helm", "bin/helm", "the helm binary")
	chart := flag.String("chart", "deploy/helm/gpureclaim", "the chart")
	out := flag.String("o", "deploy/manifests", "folder to write the manifests into")
	flag.Parse()
	files, err := deploy.Manifests(*helm, *chart)
	if err == nil {
		err = os.MkdirAll(*out, 0o755)
	}
	for name, b := range files {
		if err == nil {
			err = os.WriteFile(filepath.Join(*out, name), b, 0o644)
		}
	}
	if err == nil {
		err = valuesTable(*chart)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// valuesTable rewrites the table of values in the chart's README.
func valuesTable(chart string) error {
	b, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	vs, err := deploy.Values(b)
	if err != nil {
		return err
	}
	readme := filepath.Join(chart, "README.md")
	r, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	if r, err = deploy.WithValuesTable(r, vs); err != nil {
		return err
	}
	return os.WriteFile(readme, r, 0o644)
}
