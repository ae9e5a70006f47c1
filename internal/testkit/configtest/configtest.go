// Package configtest holds the checks every configuration file of
// gpureclaim shares: each bad case names its field, and
// docs/configuration.md stays true to the types (every YAML key of a config
// type with the doc comment of its Go field, as a table between markers;
// every key the documentation names exists).
package configtest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	promconfig "github.com/prometheus/common/config"
)

// Key is one YAML key of a configuration.
type Key struct {
	Path, Type, Doc string
}

// HTTPClientKeys are the keys of Prometheus's HTTP client settings, which
// a section takes inline.
func HTTPClientKeys() []string {
	var keys []Key
	walk(reflect.TypeFor[promconfig.HTTPClientConfig](), "", nil, &keys, true)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Path
	}
	return out
}

// Keys lists every key under the config type t, documented with the field
// comments of the Go package in dir (its non-test files).
func Keys(t *testing.T, typ reflect.Type, dir string) []Key {
	t.Helper()
	docs, err := fieldDocs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var keys []Key
	walk(typ, "", docs, &keys, false)
	return keys
}

var httpType = reflect.TypeFor[promconfig.HTTPClientConfig]()

func walk(typ reflect.Type, prefix string, docs map[string]string, keys *[]Key, foreign bool) {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") {
			if f.Type == httpType && !foreign {
				*keys = append(*keys, Key{Path: join(prefix, "*"), Type: "HTTP client", Doc: "Prometheus's HTTP client settings, inline: see [HTTP clients](#http-clients)."})
				continue
			}
			if f.Type.Kind() == reflect.Map { // a map's keys are the section's own (http_headers)
				*keys = append(*keys, Key{Path: join(prefix, "<name>"), Type: typeName(elem(f.Type))})
				continue
			}
			walk(f.Type, prefix, docs, keys, foreign)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		path := join(prefix, name)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		doc := docs[typ.Name()+"."+f.Name]
		if doc == "" && ft.Kind() == reflect.Struct {
			doc = docs[ft.Name()] // the section's type says what it is
		}
		*keys = append(*keys, Key{Path: path, Type: typeName(ft), Doc: doc})
		switch {
		case ft.Kind() == reflect.Struct && !leaf(ft):
			walk(ft, path, docs, keys, foreign)
		case ft.Kind() == reflect.Slice && elem(ft).Kind() == reflect.Struct && !leaf(elem(ft)):
			walk(elem(ft), path+"[]", docs, keys, foreign)
		case ft.Kind() == reflect.Map && elem(ft).Kind() == reflect.Struct && !leaf(elem(ft)):
			walk(elem(ft), path+".<name>", docs, keys, foreign)
		}
	}
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

func elem(t reflect.Type) reflect.Type {
	t = t.Elem()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// leaf types are written as one value.
func leaf(t reflect.Type) bool {
	return t.Name() == "Duration" || t.PkgPath() == "net/url" || t.PkgPath() == "regexp" || t.Name() == "URL"
}

func typeName(t reflect.Type) string {
	switch {
	case t.Name() == "Bytes":
		return "size"
	case t.Name() == "Duration":
		return "duration"
	case t.Name() == "Secret":
		return "secret"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint16:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		return "list of " + typeName(elem(t))
	case reflect.Map:
		return "map of " + typeName(elem(t))
	case reflect.Interface:
		return "any"
	case reflect.Struct:
		if leaf(t) {
			return "string"
		}
		return "object"
	}
	return t.Kind().String()
}

// fieldDocs reads the doc comment of every struct type of a package, as
// "Type", and of each of its fields, as "Type.Field".
func fieldDocs(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			gd, ok := n.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				return true
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				doc := ts.Doc.Text()
				if doc == "" {
					doc = gd.Doc.Text()
				}
				docs[ts.Name.Name] = strings.Join(strings.Fields(doc), " ")
				structDocs(ts.Name.Name, st, docs)
			}
			return false
		})
	}
	return docs, nil
}

// structDocs reads a struct's field comments; a field without its own takes
// the comment just before it when that names it ("QPS and Burst bound ...").
func structDocs(typeName string, st *ast.StructType, docs map[string]string) {
	last := ""
	for _, fl := range st.Fields.List {
		text := fl.Doc.Text()
		if text == "" {
			text = fl.Comment.Text()
		}
		if text != "" {
			last = text
		} else if len(fl.Names) > 0 && regexp.MustCompile(`\b`+fl.Names[0].Name+`\b`).MatchString(last) {
			text = last
		}
		for _, n := range fl.Names {
			docs[typeName+"."+n.Name] = strings.Join(strings.Fields(text), " ")
		}
	}
}

// Table writes keys as a Markdown table.
func Table(keys []Key) string {
	var b strings.Builder
	b.WriteString("| key | type | what |\n| --- | --- | --- |\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k.Path, k.Type, strings.ReplaceAll(k.Doc, "|", `\|`))
	}
	return b.String()
}

// Check compares the block between <!-- BEGIN name --> and <!-- END name
// --> of the file with want, or rewrites it when update is set.
func Check(t *testing.T, file, name, want string, update bool) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := []byte("<!-- BEGIN "+name+" -->\n"), []byte("<!-- END "+name+" -->")
	i, j := bytes.Index(b, begin), bytes.Index(b, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q", file, begin, end)
	}
	got := string(b[i+len(begin) : j])
	if got == want {
		return
	}
	if !update {
		t.Fatalf("%s: the table %s differs from the configuration's types: run go test with -update-doc", file, name)
	}
	out := slices.Concat(b[:i+len(begin)], []byte(want), b[j:])
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// listIndex is a list's index in a key ([0], or [] as the tables write it).
var listIndex = regexp.MustCompile(`\[[0-9]*\]`)

// httpClientKeys are HTTPClientKeys, listed once.
var httpClientKeys = HTTPClientKeys()

// keyName is a dotted key in backticks, as the documentation writes one.
var keyName = regexp.MustCompile("`([a-z_]+(?:\\.[a-z_0-9<>*]+|\\[\\])+)")

// Named returns the keys a Markdown text names in backticks whose first
// part is one of roots.
func Named(text string, roots []string) []string {
	var out []string
	for _, m := range keyName.FindAllStringSubmatchIndex(text, -1) {
		if end := m[3]; end < len(text) && !strings.ContainsRune("` :=,)", rune(text[end])) {
			continue // a longer word: a resource (workloads.kueue.x-k8s.io), a file
		}
		key := text[m[2]:m[3]]
		root, _, _ := strings.Cut(key, ".")
		root = strings.TrimSuffix(root, "[]")
		if slices.Contains(roots, root) {
			out = append(out, key)
		}
	}
	return out
}

// Exists says whether a named key is one of keys, reading <name> for any
// map key, dropping list indexes, and taking a section's HTTP client keys.
func Exists(name string, keys []Key) bool {
	norm := listIndex.ReplaceAllString(name, "")
	for _, k := range keys {
		path := strings.ReplaceAll(k.Path, "[]", "")
		if path == norm || matchesMap(path, norm) {
			return true
		}
		if prefix, ok := strings.CutSuffix(path, ".*"); ok {
			if rest, ok := strings.CutPrefix(norm, prefix+"."); ok && slices.Contains(httpClientKeys, rest) {
				return true
			}
		}
	}
	return false
}

// matchesMap says whether a path with <name> parts matches a named key.
func matchesMap(path, name string) bool {
	p, n := strings.Split(path, "."), strings.Split(name, ".")
	if len(p) != len(n) {
		return false
	}
	for i := range p {
		if p[i] != n[i] && p[i] != "<name>" && n[i] != "<name>" && !strings.HasPrefix(n[i], "<") {
			return false
		}
	}
	return true
}

// Documented fails for a key without a doc comment.
func Documented(t *testing.T, keys []Key) {
	t.Helper()
	for _, k := range keys {
		if k.Doc == "" {
			t.Errorf("%s has no doc comment: write one on its Go field", k.Path)
		}
	}
}

// NamedKeysExist fails for a key that a page of the documentation under
// root names and that is not one of keys (its first part is one of the
// keys' roots). The chart's README names the chart's values, not these keys.
func NamedKeysExist(t *testing.T, root, what string, keys []Key) {
	t.Helper()
	var roots []string
	for _, k := range keys {
		if !strings.ContainsAny(k.Path, ".[") {
			roots = append(roots, k.Path)
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"README.md", "METRICS.md", "deploy/systemd/README.md"} {
		pages = append(pages, filepath.Join(root, p))
	}
	for _, f := range pages {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range Named(string(b), roots) {
			if !Exists(name, keys) {
				t.Errorf("%s names %s, which %s does not have", f, name, what)
			}
		}
	}
}

// BadCases loads each testdata/conf.*.bad.yml of the package and checks
// that its error contains what the file's first line says ("# error: ...")
// and names the file.
func BadCases(t *testing.T, load func(path string) error) {
	files, err := filepath.Glob("testdata/conf.*.bad.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/conf.*.bad.yml: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			want, ok := strings.CutPrefix(first, "# error: ")
			if !ok {
				t.Fatal("the first line says the expected error: # error: ...")
			}
			err = load(f)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want one that contains %q", err, want)
			}
			if !strings.Contains(err.Error(), f) {
				t.Fatalf("error %v does not name the file", err)
			}
		})
	}
}
