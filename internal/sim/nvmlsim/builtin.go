package nvmlsim

import (
	"embed"
	"fmt"
	"os"
	"path"
	"strings"
)

//go:embed scenarios/*.yaml
var builtin embed.FS

// Builtin lists the scenarios compiled into the binary.
func Builtin() []string {
	entries, _ := builtin.ReadDir("scenarios")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return names
}

// Open loads a built-in scenario by name ("demo") or a scenario file by path.
func Open(name string) (*Scenario, error) {
	if b, err := builtin.ReadFile(path.Join("scenarios", name+".yaml")); err == nil {
		sc, err := Parse(b, ".")
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", name, err)
		}
		return sc, nil
	}
	if _, err := os.Stat(name); err != nil {
		return nil, fmt.Errorf("scenario %q is neither a file nor built in (%s)", name, strings.Join(Builtin(), ", "))
	}
	return Load(name)
}
