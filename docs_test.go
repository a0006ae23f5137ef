package labels_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The documents name code: file paths (`postgres/accept.go`,
// `e2e/chaos/`) and Go names (`postgres.Accept`, `stacktest.ExpireLease`,
// and a package doc's [Name] links). Every such name must exist, so that a
// document never points at code that moved. The documents are every
// Markdown file of the repository and every package comment (the doc.go
// files, and a package comment in any other file, such as e2e/chaos's in
// doc_test.go). What is checked:
//
//   - a code span whose text starts with a top-level folder of the
//     repository and looks like a path must name a file or folder that
//     exists (a `:line` suffix and a trailing `/` are allowed; a plain path
//     .gitignore lists is a file a user makes, and may be named);
//   - a code span `pkg.Name` (or `pkg.Name.Member`, `pkg.Name(x)`; not a
//     snippet with spaces, whose pkg may be a variable) whose pkg
//     is the last element of one of the repository's package paths must name
//     a top-level declaration of one such package, or a method or field
//     of one of its types;
//   - in a package comment, a plain path into the repository, a plain
//     pkg.Name and a doc link [Name], [Type.Member] or [pkg.Name] must
//     resolve the same way, [Name] alone within the package itself.
func TestDocumentsNameCodeThatExists(t *testing.T) {
	t.Parallel()
	idx := indexRepository(t)
	var problems []string
	for _, doc := range idx.docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		isGo := strings.HasSuffix(doc, ".go")
		var self string // the package of a doc.go
		if isGo {
			self, text = packageComment(t, doc)
		}
		for _, span := range codeSpans(text) {
			if p, ok := idx.pathLike(span); ok {
				if _, err := os.Stat(filepath.FromSlash(p)); err != nil && !idx.ignored[p] {
					problems = append(problems, doc+": `"+span+"`: no such file or folder")
				}
				continue
			}
			if pkg, name, ok := qualified(span); ok && idx.pkgs[pkg] != nil && !strings.Contains(span, " ") {
				if !idx.pkgs[pkg][name] {
					problems = append(problems, doc+": `"+span+"`: package "+pkg+" declares no "+name)
				}
			}
		}
		if isGo {
			for _, m := range plainPath.FindAllStringSubmatch(text, -1) {
				w := strings.TrimRight(m[1], ".")
				if p, ok := idx.pathLike(w); ok {
					if _, err := os.Stat(filepath.FromSlash(p)); err != nil && !idx.ignored[p] {
						problems = append(problems, doc+": "+w+": no such file or folder")
					}
				}
			}
			for _, m := range plainQual.FindAllStringSubmatch(text, -1) {
				if decls, ok := idx.pkgs[m[1]]; ok && !decls[m[2]] {
					problems = append(problems, doc+": "+m[1]+"."+m[2]+": package "+m[1]+" declares no "+m[2])
				}
			}
			for _, m := range docLink.FindAllStringSubmatch(text, -1) {
				pkg, name := self, m[1]
				if first, rest, ok := strings.Cut(name, "."); ok && first != "" && first[0] >= 'a' && first[0] <= 'z' {
					pkg, name = first, rest
				}
				if decls, ok := idx.pkgs[pkg]; ok && !decls[name] {
					problems = append(problems, doc+": ["+m[1]+"]: package "+pkg+" declares no "+name)
				}
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

var (
	codeSpan  = regexp.MustCompile("`([^`\n]+)`")
	docLink   = regexp.MustCompile(`\[((?:[a-z]+\.)?[A-Z][A-Za-z0-9_]*(?:\.[A-Z][A-Za-z0-9_]*)?)\]`)
	pathText  = regexp.MustCompile(`^[A-Za-z0-9_.\-/]+$`)
	plainPath = regexp.MustCompile(`(?:^|[\s(])([a-z][A-Za-z0-9_.\-]*/[A-Za-z0-9_.\-/]*)`)
	plainQual = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)`)
	qualText  = regexp.MustCompile(`^([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?(?:[.(].*)?$`)
)

func codeSpans(text string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

// qualified splits `pkg.Name…` into pkg and Name, or Name.Member for
// `pkg.Name.Member…`.
func qualified(span string) (pkg, name string, ok bool) {
	m := qualText.FindStringSubmatch(span)
	if m == nil {
		return "", "", false
	}
	if m[3] != "" {
		return m[1], m[2] + "." + m[3], true
	}
	return m[1], m[2], true
}

type repoIndex struct {
	top  map[string]bool            // top-level folders
	pkgs map[string]map[string]bool // package name → declared names (every package of that name)
	docs []string                   // Markdown files and doc.go files
	// ignored are the plain paths .gitignore lists: files a user makes
	// (deploy/kubernetes/secrets.env), which a document may name.
	ignored map[string]bool
}

// pathLike reports whether span is a path into the repository, and which.
func (r *repoIndex) pathLike(span string) (string, bool) {
	if i := strings.IndexByte(span, ':'); i > 0 {
		span = span[:i]
	}
	if !strings.Contains(span, "/") || !pathText.MatchString(span) || strings.Contains(span, "..") {
		return "", false
	}
	first := strings.SplitN(strings.TrimPrefix(span, "./"), "/", 2)[0]
	if !r.top[first] {
		return "", false
	}
	return strings.TrimSuffix(strings.TrimPrefix(span, "./"), "/"), true
}

func indexRepository(t *testing.T) *repoIndex {
	t.Helper()
	r := &repoIndex{top: map[string]bool{}, pkgs: map[string]map[string]bool{}, ignored: map[string]bool{}}
	if b, err := os.ReadFile(".gitignore"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if l != "" && !strings.ContainsAny(l, "#!*?[") {
				r.ignored[strings.Trim(l, "/")] = true
			}
		}
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			r.top[e.Name()] = true
		}
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(name, ".md"):
			r.docs = append(r.docs, p)
		case strings.HasSuffix(name, ".go"):
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution|parser.ParseComments)
			if err != nil {
				return err
			}
			if f.Doc != nil {
				r.docs = append(r.docs, p)
			}
			pkg := f.Name.Name
			if strings.HasSuffix(pkg, "_test") {
				return nil
			}
			if pkg == "main" {
				return nil
			}
			decls := r.pkgs[pkg]
			if decls == nil {
				decls = map[string]bool{}
				r.pkgs[pkg] = decls
			}
			declare(f, decls)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// declare records the top-level names of f, and its methods and struct
// fields as Type.Name (a document may name `pkg.Type.Field` or a method by
// its type). An embedded field is recorded by its type's name.
func declare(f *ast.File, decls map[string]bool) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			decls[d.Name.Name] = true
			if d.Recv != nil && len(d.Recv.List) == 1 {
				if recv := typeName(d.Recv.List[0].Type); recv != "" {
					decls[recv+"."+d.Name.Name] = true
				}
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					decls[s.Name.Name] = true
					var fields *ast.FieldList
					switch t := s.Type.(type) {
					case *ast.StructType:
						fields = t.Fields
					case *ast.InterfaceType:
						fields = t.Methods
					}
					if fields == nil {
						continue
					}
					for _, fl := range fields.List {
						for _, n := range fl.Names {
							decls[s.Name.Name+"."+n.Name] = true
						}
						if len(fl.Names) == 0 {
							decls[s.Name.Name+"."+typeName(fl.Type)] = true
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						decls[n.Name] = true
					}
				}
			}
		}
	}
}

// typeName is the name of a receiver or embedded type: T of T, *T, T[X],
// pkg.T.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.IndexExpr:
		return typeName(e.X)
	case *ast.IndexListExpr:
		return typeName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// packageComment returns the package name and documentation of a doc.go
// file.
func packageComment(t *testing.T, file string) (pkg, doc string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		return f.Name.Name, ""
	}
	return f.Name.Name, f.Doc.Text()
}
