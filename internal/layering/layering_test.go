package layering

import (
	"bufio"
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const (
	module = "github.com/stepwise-run/stepwise"
	// internalPrefix starts every internal package of the module.
	internalPrefix = module + "/internal"
)

// TestPublicPackagesExposeNoInternalType reads the exported API of every
// package under pkg/ from its compiled export data and fails for each
// exported identifier whose type mentions a type of an internal package:
// the public API is its own, so a change to stored state or to the engine
// never changes it. A public package may import internal packages for its
// implementation.
func TestPublicPackagesExposeNoInternalType(t *testing.T) {
	exports := exportData(t)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	public := goList(t, "-f", "{{.ImportPath}}", module+"/pkg/...")
	if len(public) == 0 {
		t.Fatal("found no public packages")
	}
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("reading the export data of %s: %v", path, err)
		}
		c := &checker{t: t, seen: map[types.Type]bool{}}
		for _, name := range pkg.Scope().Names() {
			obj := pkg.Scope().Lookup(name)
			if !obj.Exported() {
				continue
			}
			c.where = pkg.Name() + "." + name
			c.object(obj)
		}
	}
}

// TestTheCheckFindsAnInternalType makes sure the check is not blind: the
// session workflow's wire contract mentions session types.
func TestTheCheckFindsAnInternalType(t *testing.T) {
	exports := exportData(t)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	pkg, err := imp.Import(internalPrefix + "/sessionrpc")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	c := &checker{t: rec, seen: map[types.Type]bool{}, where: "sessionrpc.SessionInput"}
	c.object(pkg.Scope().Lookup("SessionInput"))
	if len(rec.errors) == 0 || !strings.Contains(rec.errors[0], "internal/session.StartInput") {
		t.Errorf("the check found %q in sessionrpc.SessionInput, want its session.StartInput", rec.errors)
	}
}

type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

type recorder struct{ errors []string }

func (*recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// checker walks the types an exported identifier shows.
type checker struct {
	t     reporter
	where string
	seen  map[types.Type]bool
}

func (c *checker) object(obj types.Object) {
	switch obj := obj.(type) {
	case *types.TypeName:
		if obj.IsAlias() {
			c.typ(obj.Type())
			return
		}
		named, ok := obj.Type().(*types.Named)
		if !ok {
			c.typ(obj.Type())
			return
		}
		c.named(named)
	default:
		c.typ(obj.Type())
	}
}

// named checks a type of the public package: its structure and its
// exported methods.
func (c *checker) named(n *types.Named) {
	if c.seen[n] {
		return
	}
	c.seen[n] = true
	where := c.where
	defer func() { c.where = where }()
	if n.Obj().Exported() {
		c.where = n.Obj().Pkg().Name() + "." + n.Obj().Name()
	}
	c.typ(n.Underlying())
	for i := range n.NumMethods() {
		if m := n.Method(i); m.Exported() {
			c.where = n.Obj().Pkg().Name() + "." + n.Obj().Name() + "." + m.Name()
			c.typ(m.Type())
		}
	}
}

func (c *checker) typ(t types.Type) {
	switch t := t.(type) {
	case *types.Alias:
		if c.foreign(t.Obj()) {
			return
		}
		c.typ(types.Unalias(t))
	case *types.Named:
		if c.foreign(t.Obj()) {
			return
		}
		for i := range t.TypeArgs().Len() {
			c.typ(t.TypeArgs().At(i))
		}
		c.named(t)
	case *types.Pointer:
		c.typ(t.Elem())
	case *types.Slice:
		c.typ(t.Elem())
	case *types.Array:
		c.typ(t.Elem())
	case *types.Chan:
		c.typ(t.Elem())
	case *types.Map:
		c.typ(t.Key())
		c.typ(t.Elem())
	case *types.Signature:
		c.tuple(t.Params())
		c.tuple(t.Results())
		for i := range t.TypeParams().Len() {
			c.typ(t.TypeParams().At(i).Constraint())
		}
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() || f.Embedded() {
				c.typ(f.Type())
			}
		}
	case *types.Interface:
		for i := range t.NumExplicitMethods() {
			if m := t.ExplicitMethod(i); m.Exported() {
				c.typ(m.Type())
			}
		}
		for i := range t.NumEmbeddeds() {
			c.typ(t.EmbeddedType(i))
		}
	case *types.TypeParam:
		c.typ(t.Constraint())
	}
}

func (c *checker) tuple(tu *types.Tuple) {
	for i := range tu.Len() {
		c.typ(tu.At(i).Type())
	}
}

// foreign reports whether a type name is outside the public API's own
// packages: an internal package's (reported) or another module's (not
// checked).
func (c *checker) foreign(obj *types.TypeName) bool {
	if obj.Pkg() == nil {
		return true
	}
	path := obj.Pkg().Path()
	if path == internalPrefix || strings.HasPrefix(path, internalPrefix+"/") {
		c.t.Helper()
		c.t.Errorf("%s shows %s.%s: a public package exposes an internal type; give the public package its own type", c.where, path, obj.Name())
		return true
	}
	return path != module && !strings.HasPrefix(path, module+"/")
}

// exportData maps each package the public packages depend on (and the
// engine, for the self-check) to its export data file.
func exportData(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range goList(t, "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", module+"/pkg/...", internalPrefix+"/engine") {
		path, file, _ := strings.Cut(line, "\t")
		out[path] = file
	}
	return out
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}
