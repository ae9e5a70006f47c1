package config

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gpureclaim/gpureclaim/internal/testkit/configtest"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the reclaimer's table in docs/configuration.md")

const configDoc = "../../docs/configuration.md"

// Every key of the file is in docs/configuration.md with its doc comment,
// every HTTP client key in its table, and every key a page of the
// documentation names exists.
func TestConfigDoc(t *testing.T) {
	keys := configtest.Keys(t, reflect.TypeFor[Config](), ".")
	configtest.Check(t, configDoc, "reclaimer", configtest.Table(keys), *updateDoc)
	configtest.Documented(t, keys)

	b, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range configtest.HTTPClientKeys() {
		top, _, _ := strings.Cut(k, ".")
		if !strings.Contains(string(b), "`"+top+"`") {
			t.Errorf("%s: the HTTP client key %s is not in its table", configDoc, top)
		}
	}

	configtest.NamedKeysExist(t, "../..", "the reclaimer's config", keys)
}
