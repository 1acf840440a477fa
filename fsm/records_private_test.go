package fsm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// storedAsJSON are the types the buckets hold as JSON (every other record
// has MessagePack methods generated in records_msgp.go).
var storedAsJSON = []string{"taskRecord", "attemptRecord", "ackRecord", "memberRecord", "tokenRecord", "jobTombstone", "pinRef"}

// TestRecordsArePrivate: no type the buckets store is exported, and no
// exported declaration of the package (a function or method's signature,
// a field of an exported type) names one, so how the state machine
// stores its records is not visible outside it.
func TestRecordsArePrivate(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}

	// The records: the receivers of the generated methods, and the JSON
	// ones, each of which must be declared.
	records := map[string]bool{}
	declared := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if fset.Position(d.Pos()).Filename == "records_msgp.go" && d.Name.Name == "MarshalMsg" {
					records[receiverName(d)] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						declared[ts.Name.Name] = true
					}
				}
			}
		}
	}
	if len(records) < 5 {
		t.Fatalf("found %d types with generated methods in records_msgp.go, want the binary records", len(records))
	}
	for _, name := range storedAsJSON {
		if !declared[name] {
			t.Errorf("record type %s is not declared (renamed? update storedAsJSON)", name)
		}
		records[name] = true
	}
	names := make([]string, 0, len(records))
	for name := range records {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if ast.IsExported(name) {
			t.Errorf("record type %s is exported", name)
		}
	}

	// Exported declarations that name a record.
	namedRecords := func(n ast.Node) []string {
		var out []string
		ast.Inspect(n, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && records[id.Name] {
				out = append(out, id.Name)
			}
			return true
		})
		return out
	}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !ast.IsExported(receiverName(d))) {
					continue
				}
				if n := namedRecords(d.Type); len(n) > 0 {
					t.Errorf("%s: exported %s names record %v", fset.Position(d.Pos()), d.Name.Name, n)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						if n := namedRecords(ts.Type); len(n) > 0 {
							t.Errorf("%s: exported type %s names record %v", fset.Position(ts.Pos()), ts.Name.Name, n)
						}
						continue
					}
					for _, fl := range st.Fields.List {
						exported := len(fl.Names) == 0 // embedded
						for _, n := range fl.Names {
							exported = exported || n.IsExported()
						}
						if n := namedRecords(fl.Type); exported && len(n) > 0 {
							t.Errorf("%s: a field of exported type %s names record %v", fset.Position(fl.Pos()), ts.Name.Name, n)
						}
					}
				}
			}
		}
	}
}

// receiverName is the name of a method's receiver type.
func receiverName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return ""
	}
	typ := d.Recv.List[0].Type
	if st, ok := typ.(*ast.StarExpr); ok {
		typ = st.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
