package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goChecker checks printed go commands without running them (they test,
// fuzz or benchmark for minutes; the jepsen ones need the machine lock).
type goChecker struct {
	t        *testing.T
	dir      string // for built programs
	goFlags  map[string]bool
	programs map[string]*goProgram
}

// goProgram is a program of the module a printed `go run` runs.
type goProgram struct {
	bin   string
	flags map[string]map[string]bool // command ("" for the global flags) -> flag -> takes a value
}

var envAssign = regexp.MustCompile(`^([A-Z_][A-Z0-9_]*)=`)

// goTestBoolFlags are the flags of go test and go build that take no value.
var goTestBoolFlags = map[string]bool{
	"race": true, "v": true, "short": true, "json": true, "cover": true, "failfast": true,
	"benchmem": true, "msan": true, "asan": true, "a": true, "n": true, "x": true,
	"trimpath": true, "work": true, "fullpath": true, "i": true, "linkshared": true,
}

func (g *goChecker) check(c docCommand) {
	t := g.t
	t.Helper()
	if strings.ContainsAny(c.cmd, "$`|;><") && !strings.Contains(c.cmd, "'") {
		t.Errorf("%s: shell syntax the checker cannot read", c)
		return
	}
	words := shellWords(c.cmd)
	dir := docRoot
	if len(words) > 3 && words[0] == "cd" && words[2] == "&&" {
		dir, words = filepath.Join(docRoot, words[1]), words[3:]
	}
	var env []string
	for len(words) > 0 && envAssign.MatchString(words[0]) {
		env = append(env, envAssign.FindStringSubmatch(words[0])[1])
		words = words[1:]
	}
	words = words[1:] // go
	if len(words) > 2 && words[0] == "-C" {
		dir, words = filepath.Join(dir, words[1]), words[2:]
	}
	if len(words) == 0 {
		t.Errorf("%s: no go subcommand", c)
		return
	}
	switch words[0] {
	case "test", "build":
		g.checkTest(c, dir, words[0], env, words[1:])
	case "run":
		if len(env) > 0 {
			t.Errorf("%s: the checker does not check environment variables of go run", c)
		}
		g.checkRun(c, dir, words[1:])
	default:
		t.Errorf("%s: the checker knows go test and go run, not go %s", c, words[0])
	}
}

// knownGoFlags are the flags `go help testflag` and `go help build` list.
func (g *goChecker) knownGoFlags() map[string]bool {
	if g.goFlags != nil {
		return g.goFlags
	}
	g.goFlags = map[string]bool{}
	for _, topic := range []string{"testflag", "build"} {
		out, err := exec.Command("go", "help", topic).Output()
		if err != nil {
			g.t.Fatalf("go help %s: %v", topic, err)
		}
		for _, m := range regexp.MustCompile(`(?m)^\t-([a-z][a-z0-9.]*)`).FindAllStringSubmatch(string(out), -1) {
			g.goFlags[m[1]] = true
		}
	}
	// go help build describes -o in prose, not in its list.
	g.goFlags["o"] = true
	if !g.goFlags["fuzztime"] || !g.goFlags["race"] {
		g.t.Fatalf("go help lists no -fuzztime or -race: the pattern is wrong (%d flags)", len(g.goFlags))
	}
	return g.goFlags
}

func (g *goChecker) checkTest(c docCommand, dir, sub string, env, args []string) {
	t := g.t
	t.Helper()
	known := g.knownGoFlags()
	values := map[string]string{}
	var pkgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			pkgs = append(pkgs, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			t.Errorf("%s: go %s has no flag -%s", c, sub, name)
			return // its value, if any, would be read as a package
		}
		if !goTestBoolFlags[name] && !hasValue {
			if i+1 == len(args) {
				t.Errorf("%s: -%s has no value", c, name)
				continue
			}
			i++
			value = args[i]
		}
		values[name] = value
	}
	if len(pkgs) == 0 {
		pkgs = []string{"."}
	}
	listArgs := []string{"list", "-f", "{{.Dir}}"}
	if tags := values["tags"]; tags != "" {
		listArgs = append(listArgs, "-tags", tags)
	}
	list := exec.Command("go", append(listArgs, pkgs...)...)
	list.Dir = dir
	out, err := list.Output()
	if err != nil {
		t.Errorf("%s: go list %s: %v", c, strings.Join(pkgs, " "), err)
		return
	}
	dirs := strings.Fields(string(out))
	var src strings.Builder
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*.go"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	for _, flag := range []string{"run", "fuzz"} {
		re, ok := values[flag]
		if !ok || re == "^$" {
			continue
		}
		for _, alt := range strings.Split(re, "|") {
			name := strings.Trim(alt, "^$()")
			if !regexp.MustCompile(`^\w+$`).MatchString(name) {
				t.Errorf("%s: -%s %q: the checker reads only names separated by |", c, flag, re)
				continue
			}
			want := "(t *testing.T)"
			if flag == "fuzz" {
				want = "(f *testing.F)"
			}
			if !strings.Contains(src.String(), "\nfunc "+name+want) {
				t.Errorf("%s: -%s %q: %s defines no %s%s", c, flag, re, strings.Join(pkgs, " "), name, want)
			}
		}
	}
	for _, e := range env {
		if !strings.Contains(src.String(), `"`+e+`"`) {
			t.Errorf("%s: %s does not read %s", c, strings.Join(pkgs, " "), e)
		}
	}
}

// program builds the program of pkg in dir once and reads its flags from
// its -h output, and those of each command it is given.
func (g *goChecker) program(c docCommand, dir, pkg string) *goProgram {
	t := g.t
	key := dir + "\x00" + pkg
	if p, ok := g.programs[key]; ok {
		return p
	}
	p := &goProgram{bin: filepath.Join(g.dir, fmt.Sprintf("prog%d", len(g.programs))), flags: map[string]map[string]bool{}}
	build := exec.Command("go", "build", "-o", p.bin, pkg)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: go build %s: %v\n%s", c, pkg, err, out)
	}
	g.programs[key] = p
	return p
}

var usageFlag = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)( \S+)?$`)

// flagsOf returns the flags the program prints for `[command] -h`, each
// with whether it takes a value.
func (p *goProgram) flagsOf(t *testing.T, command string) map[string]bool {
	if f, ok := p.flags[command]; ok {
		return f
	}
	args := []string{"-h"}
	if command != "" {
		args = []string{command, "-h"}
	}
	out, _ := exec.Command(p.bin, args...).CombinedOutput() // -h may exit 0 or 2
	f := map[string]bool{}
	for _, m := range usageFlag.FindAllStringSubmatch(string(out), -1) {
		f[m[1]] = m[2] != ""
	}
	if len(f) == 0 {
		t.Fatalf("%s %s lists no flags:\n%s", p.bin, strings.Join(args, " "), out)
	}
	p.flags[command] = f
	return f
}

func (g *goChecker) checkRun(c docCommand, dir string, args []string) {
	t := g.t
	t.Helper()
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		t.Errorf("%s: go run without a package", c)
		return
	}
	p := g.program(c, dir, args[0])
	command := ""
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			if command != "" {
				t.Errorf("%s: a second command %q", c, a)
				return
			}
			command = a
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			continue // the usage p.flagsOf printed
		}
		takesValue, ok := p.flagsOf(t, command)[name]
		if !ok {
			where := "the program"
			if command != "" {
				where = "its " + command + " command"
			}
			t.Errorf("%s: %s has no flag --%s", c, where, name)
			return // its value, if any, would be read as a command
		}
		if takesValue && !hasValue {
			if i+1 == len(args) {
				t.Errorf("%s: --%s has no value", c, name)
				continue
			}
			i++
			value = args[i]
		}
		// bench passes --metastore-flag to every member's serve.
		if name == "metastore-flag" {
			if _, _, err := loadConfig([]string{value}, noEnv, io.Discard); err != nil {
				t.Errorf("%s: --metastore-flag=%s is no serve flag: %v", c, value, err)
			}
		}
	}
	p.flagsOf(t, command) // -h prints the flags (of the command, which exists)
}
