package rules

import (
	"flag"
	"reflect"
	"testing"

	"github.com/gpureclaim/gpureclaim/internal/testkit/configdoc"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the rules' table in docs/configuration.md")

// Every key of the rules' config is in docs/configuration.md with its doc
// comment, and every key a page of the documentation names exists.
func TestConfigDoc(t *testing.T) {
	keys := configdoc.Keys(t, reflect.TypeFor[Config](), ".")
	configdoc.Check(t, "../docs/configuration.md", "rules", configdoc.Table(keys), *updateDoc)
	configdoc.Documented(t, keys)
	configdoc.NamedKeysExist(t, "..", "the rules' config", keys)
}
