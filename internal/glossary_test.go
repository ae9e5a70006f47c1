package internal_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// refused are Go names the glossary (docs/glossary.md) has another word
// for: a top owner is topOwner, not a controller's abbreviation.
var refused = map[string]string{
	"ctl": "topOwner (a top owner is not a controller)",
}

// No identifier of the module's Go code is a word the glossary refuses.
func TestGlossaryWordsInTheCode(t *testing.T) {
	root := filepath.Join("..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if want, bad := refused[id.Name]; bad {
					t.Errorf("%s: %s: the glossary's word is %s", fset.Position(id.Pos()), id.Name, want)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
}
