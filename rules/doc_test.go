package rules

import (
	"flag"
	"reflect"
	"testing"

	"github.com/gpureclaim/gpureclaim/internal/testkit/configtest"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the rules' table in docs/configuration.md")

// Every key of the rules' config is in docs/configuration.md with its doc
// comment, and every key a page of the documentation names exists.
func TestConfigDoc(t *testing.T) {
	keys := configtest.Keys(t, reflect.TypeFor[Config](), ".")
	configtest.Check(t, "../docs/configuration.md", "rules", configtest.Table(keys), *updateDoc)
	configtest.Documented(t, keys)
	configtest.NamedKeysExist(t, "..", "the rules' config", keys)
}
