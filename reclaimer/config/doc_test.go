package config

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gpureclaim/gpureclaim/internal/testkit/configdoc"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the reclaimer's table in docs/configuration.md")

const configDoc = "../../docs/configuration.md"

// Every key of the file is in docs/configuration.md with its doc comment,
// every HTTP client key in its table, and every key a page of the
// documentation names exists.
func TestConfigDoc(t *testing.T) {
	keys := configdoc.Keys(t, reflect.TypeFor[Config](), ".")
	configdoc.Check(t, configDoc, "reclaimer", configdoc.Table(keys), *updateDoc)
	configdoc.Documented(t, keys)

	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range configdoc.HTTPClientKeys() {
		top, _, _ := strings.Cut(k, ".")
		if !strings.Contains(string(b), "`"+top+"`") {
			t.Errorf("%s: the HTTP client key %s is not in its table", configDoc, top)
		}
	}

	configdoc.NamedKeysExist(t, "../..", "the reclaimer's config", keys)
}
