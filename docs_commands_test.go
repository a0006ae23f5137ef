package labels_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The commands the documents quote must run as written. A command is a line
// of a fenced shell block (```sh, ```bash, ```shell, ```console or a block
// without a language; an example's output goes in a ```text block) or a code
// span that starts like one, in README.md, CONTRIBUTING.md and docs/*.md.
// What is checked, without a database or a server:
//
//   - `go tool task X`: X is a task of Taskfile.yml; arguments after `--`
//     are checked as below when X is also a program of the repository
//     (cmd/X, or tools/X in the tools' module);
//   - `go tool X` otherwise: the go command knows the tool;
//   - `go [-C DIR] test|run|build|vet|list|install ./…`: the packages exist
//     in that module (`go list`), a `-run`/`-bench` name is a function of
//     the package, and the program of `go run` takes the arguments after it;
//   - `api`, `worker`, `reconcile`, `carrier` (and a program after `go run`
//     or a task): every subcommand and flag is one its `--help` shows (the
//     usage lines `bin sub… PLACEHOLDER` name the subcommands and how many
//     arguments follow; a `bin sub --help` the top help names is read too),
//     and a command that is only `--help` or `--version` is run and must exit 0.
//
// A line with ": " is output (`reconcile run 1: invoice.csv`), not a command.
func TestDocumentedCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary the documents name; not with -short")
	}
	t.Parallel()
	env := newRealCommandEnv(t)

	docs := []string{"README.md", "CONTRIBUTING.md"}
	more, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, more...)
	var cmds []docCommand
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, docCommands(doc, string(b), binaries)...)
	}
	if len(cmds) < 20 {
		t.Fatalf("only %d commands found in the documents: the parser lost them", len(cmds))
	}
	for _, p := range env.checkAll(cmds) {
		t.Error(p)
	}

	// The same checker over a document that names what does not exist: each
	// broken command is reported, each good one is not.
	t.Run("a broken document fails", func(t *testing.T) {
		broken := "# broken\n\n```sh\n" +
			"go tool task no-such-task\n" +
			"go test ./no/such/package\n" +
			"go test ./bench\n" + // the bench is in the tools' module
			"go -C tools test ./bench -run '^$' -bench BenchmarkNoSuchThing\n" +
			"api caller remove NAME\n" +
			"reconcile --frobnicate\n" +
			"reconcile void --run 1 --invoice FILE\n" +
			"carrier invoice --day 2026-12-02 --no-such-flag\n" +
			"go tool task api -- --no-such-flag\n" +
			"go tool task db\n" +
			"api webhook set CALLER https://hooks.example\n" +
			"```\n\nProse with `worker --no-such-flag` and `go tool task db:stop`.\n"
		cmds := docCommands("broken.md", broken, binaries)
		problems := env.checkAll(cmds)
		want := []string{
			"broken.md:4", "broken.md:5", "broken.md:6", "broken.md:7", "broken.md:8",
			"broken.md:9", "broken.md:10", "broken.md:11", "broken.md:12", "broken.md:17",
		}
		requireProblemsAt(t, problems, want)
	})
}

// The checker alone, over a fixture whose help texts and tasks are given:
// it needs no build, and shows each rule failing.
func TestDocCommandChecker(t *testing.T) {
	t.Parallel()
	helps := map[string]string{
		"tool --help": "Usage:\n  tool                 serve\n  tool migrate         migrate\n" +
			"  tool user add NAME   add a user\n  tool user list [--all]\n" +
			"       tool export --out FILE [flags]   (tool export --help)\n\n" +
			"Flags:\n  --addr ADDR   listen\n  --verbose     more\n",
		"tool export --help": "Usage: tool export --out FILE [--format csv|json] [--gzip]\n",
	}
	env := &commandEnv{
		tasks:    map[string]bool{"test": true, "tool": true},
		programs: map[string]program{"tool": {name: "tool"}},
		help: func(p program, path []string) (string, error) {
			h, ok := helps[strings.Join(append(append([]string{p.name}, path...), "--help"), " ")]
			if !ok {
				return "", fmt.Errorf("no help")
			}
			return h, nil
		},
		run: func(p program, args []string) (string, error) {
			if len(args) == 1 && args[0] == "--version" {
				return p.name + " v1", nil
			}
			return "", fmt.Errorf("exit status 2")
		},
		packages: func(dir, pattern string) error {
			if pattern == "./ok" || pattern == "./cmd/..." {
				return nil
			}
			return fmt.Errorf("no package %s in %s", pattern, dir)
		},
		funcs:  func(dir, pattern, name string) bool { return name == "TestThere" },
		tools:  func(name string) bool { return name == "pprof" },
		goTask: "task",
		programOf: func(dir, pkg string) (program, bool) {
			return program{name: "tool"}, dir == "." && pkg == "./cmd/tool"
		},
	}
	doc := "```sh\n" +
		"$ go tool task test -- -race    # ok\n" + // 2
		"go tool task lint\n" + // 3: no such task
		"go tool task tool -- --addr :1 user add bob\n" + // 4
		"go tool task tool -- --port 1\n" + // 5: no such flag
		"go test ./ok -run TestThere\n" + // 6
		"go test ./ok -run TestGone\n" + // 7: no such test
		"go build ./cmd/... && go vet ./nope\n" + // 8: no such package
		"X=1 tool user add NAME\n" + // 9
		"tool user remove NAME\n" + // 10: no such subcommand
		"tool migrate extra\n" + // 11: too many arguments
		"tool export --out f.csv --format json --gzip\n" + // 12
		"tool export --out f.csv --addr x\n" + // 13: not export's flag
		"tool (--verbose | --addr ADDR) [--help]\n" + // 14
		"tool user list --all\n" + // 15
		"tool --version\n" + // 16
		"go tool pprof -seconds 10 http://x\n" + // 17
		"go tool nosuch\n" + // 18: no such tool
		"tool user\n" + // 19: names the group
		"tool\n" + // 20
		"tool run 1: a report line\n" + // 21: output
		"go -C sub test ./ok\n" + // 22
		"```\n\n```text\ntool --nothing-checked\n```\n\n" +
		"Prose: `tool --bogus`, `go tool task test`, `tool user list|add`, the `tool` binary.\n" // 29
	cmds := docCommands("f.md", doc, []string{"tool"})
	var lines []string
	for _, c := range cmds {
		lines = append(lines, c.where)
	}
	// Every shell line but the output line (line 8 is two), and three of
	// the four spans.
	if len(cmds) != 24 {
		t.Fatalf("parsed %d commands, want 24: %v", len(cmds), lines)
	}
	problems := env.checkAll(cmds)
	requireProblemsAt(t, problems, []string{"f.md:3", "f.md:5", "f.md:7", "f.md:8", "f.md:10",
		"f.md:11", "f.md:13", "f.md:18", "f.md:29"})
	for _, p := range problems {
		if strings.HasPrefix(p, "f.md:29") && !strings.Contains(p, "--bogus") {
			t.Errorf("the span problem names another flag: %s", p)
		}
	}
}

// requireProblemsAt fails unless problems are reported at exactly the given
// places (file:line), at least one each.
func requireProblemsAt(t *testing.T, problems, want []string) {
	t.Helper()
	got := map[string]bool{}
	for _, p := range problems {
		got[strings.SplitN(p, ": ", 2)[0]] = true
	}
	var missing, extra []string
	for _, w := range want {
		if !got[w] {
			missing = append(missing, w)
		}
		delete(got, w)
	}
	for w := range got {
		extra = append(extra, w)
	}
	if len(missing)+len(extra) > 0 {
		sort.Strings(extra)
		t.Errorf("no problem reported at %v, one reported at %v (each right); reported:\n%s", missing, extra, strings.Join(problems, "\n"))
	}
}

// binaries are the repository's programs a document names by their name.
var binaries = []string{"api", "worker", "reconcile", "carrier"}

type docCommand struct {
	where string // file:line
	text  string
}

var (
	fence      = regexp.MustCompile("^\\s*```\\s*([A-Za-z0-9_+-]*)")
	shellFence = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}
)

// docCommands returns the commands a Markdown document quotes: the lines of
// its shell blocks (a `$ ` prompt dropped, `\` continuations and indented
// `[`/`(`/`-` continuations joined, `&&` and `;` split) and its code spans
// that start like a command.
func docCommands(name, text string, programs []string) []docCommand {
	commandStart := regexp.MustCompile(`^(?:[A-Z][A-Z0-9_]*=\S*\s+)*(?:go\s+(?:tool|test|run|build|vet|list|install|-C)\s|(?:` +
		strings.Join(programs, "|") + `)(?:\s|$)|\./cmd/)`)
	var out []docCommand
	lines := strings.Split(text, "\n")
	inBlock, shell := false, false
	var prose strings.Builder
	add := func(line int, s string) {
		for _, part := range regexp.MustCompile(`\s(?:&&|;)\s`).Split(s, -1) {
			part = strings.TrimSpace(part)
			if part != "" && !strings.Contains(part, ": ") {
				out = append(out, docCommand{where: fmt.Sprintf("%s:%d", name, line), text: part})
			}
		}
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := fence.FindStringSubmatch(l); m != nil {
			if !inBlock {
				inBlock, shell = true, shellFence[strings.ToLower(m[1])]
			} else {
				inBlock = false
			}
			prose.WriteString("\n")
			continue
		}
		if !inBlock {
			prose.WriteString(l + "\n")
			continue
		}
		prose.WriteString("\n")
		if !shell {
			continue
		}
		start := i + 1
		cmd := strings.TrimPrefix(strings.TrimSpace(l), "$ ")
		for i+1 < len(lines) {
			next := lines[i+1]
			if strings.HasSuffix(cmd, "\\") {
				cmd = strings.TrimSuffix(cmd, "\\") + " " + strings.TrimSpace(next)
			} else if t := strings.TrimSpace(next); t != "" && next[0] == ' ' && strings.ContainsAny(t[:1], "[(-") {
				cmd += " " + t
			} else {
				break
			}
			prose.WriteString("\n")
			i++
		}
		cmd = stripComment(cmd)
		if commandStart.MatchString(cmd) {
			add(start, cmd)
		}
	}
	// Code spans, line by line of the text outside the blocks.
	for n, l := range strings.Split(prose.String(), "\n") {
		for _, m := range codeSpan.FindAllStringSubmatch(l, -1) {
			s := strings.TrimSpace(strings.TrimSuffix(m[1], "\\"))
			if commandStart.MatchString(s) && strings.ContainsAny(s, " \t") {
				add(n+1, s)
			}
		}
	}
	return out
}

// stripComment drops a shell comment: `#` at a word's start, outside quotes.
func stripComment(s string) string {
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return strings.TrimSpace(s[:i])
		}
	}
	return strings.TrimSpace(s)
}

// words splits a command as a shell does (quotes removed), dropping
// environment assignments in front.
func words(s string) []string {
	var out []string
	var cur strings.Builder
	quote, in := byte(0), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	for len(out) > 0 && envAssign.MatchString(out[0]) {
		out = out[1:]
	}
	return out
}

var envAssign = regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`)

// program is a main package of the repository: name is what its usage
// calls it, dir the module (. or tools), pkg its package path there.
type program struct{ name, dir, pkg string }

// commandEnv is what the checker consults; the real one builds and runs
// the programs, a test's is a fixture.
type commandEnv struct {
	tasks    map[string]bool
	programs map[string]program // by name: api, worker, reconcile, carrier
	help     func(p program, path []string) (string, error)
	run      func(p program, args []string) (string, error)
	packages func(dir, pattern string) error
	funcs    func(dir, pattern, name string) bool
	tools    func(name string) bool
	// goTask names the program of `go tool NAME` that runs Taskfile.yml.
	goTask string
	// program of a task or `go run` package, when the repository has one
	programOf func(dir, pkg string) (program, bool)
}

func (e *commandEnv) checkAll(cmds []docCommand) []string {
	var problems []string
	for _, c := range cmds {
		for _, p := range e.check(c.text) {
			problems = append(problems, c.where+": `"+c.text+"`: "+p)
		}
	}
	sort.Strings(problems)
	return problems
}

func (e *commandEnv) check(text string) []string {
	w := words(text)
	if len(w) == 0 {
		return nil
	}
	if w[0] == "go" {
		return e.checkGo(w[1:])
	}
	if strings.HasPrefix(w[0], "./cmd/") {
		name := strings.TrimPrefix(w[0], "./cmd/")
		p, ok := e.programs[name]
		if !ok {
			return []string{w[0] + ": no such program"}
		}
		return e.checkProgram(p, w[1:])
	}
	if p, ok := e.programs[w[0]]; ok {
		return e.checkProgram(p, w[1:])
	}
	return nil
}

var goPkgVerbs = map[string]bool{"test": true, "run": true, "build": true, "vet": true, "list": true, "install": true}

func (e *commandEnv) checkGo(w []string) []string {
	dir := "."
	if len(w) >= 2 && w[0] == "-C" {
		dir, w = w[1], w[2:]
	}
	if len(w) == 0 {
		return nil
	}
	verb, args := w[0], w[1:]
	if verb == "tool" {
		if len(args) == 0 {
			return nil
		}
		name := args[0]
		if e.goTask == "" || name != e.goTask {
			if !e.tools(name) {
				return []string{"go tool " + name + ": no such tool"}
			}
			return nil
		}
		return e.checkTask(args[1:])
	}
	if !goPkgVerbs[verb] {
		return nil
	}
	var problems, pkgs []string
	var runArgs []string
	for i, a := range args {
		if strings.HasPrefix(a, "./") || a == "." {
			pkgs = append(pkgs, a)
			if verb == "run" {
				runArgs = args[i+1:]
				break
			}
		}
	}
	for _, p := range pkgs {
		if err := e.packages(dir, p); err != nil {
			problems = append(problems, fmt.Sprintf("go -C %s list %s: %v", dir, p, err))
		}
	}
	if verb == "test" && len(problems) == 0 {
		for i := 0; i+1 < len(args); i++ {
			if args[i] != "-run" && args[i] != "-bench" {
				continue
			}
			name := args[i+1]
			if !regexp.MustCompile(`^\^?[A-Za-z_][A-Za-z0-9_]*\$?$`).MatchString(name) {
				continue
			}
			name = strings.Trim(name, "^$")
			for _, p := range pkgs {
				if !strings.Contains(p, "...") && !e.funcs(dir, p, name) {
					problems = append(problems, fmt.Sprintf("%s: package %s (module %s) has no func %s", args[i], p, dir, name))
				}
			}
		}
	}
	if verb == "run" && len(pkgs) == 1 && len(problems) == 0 {
		if prog, ok := e.programOf(dir, pkgs[0]); ok {
			problems = append(problems, e.checkProgram(prog, runArgs)...)
		}
	}
	return problems
}

// checkTask checks `go tool task …`'s arguments: flags of task itself, task
// names and NAME=value variables, and after `--` the task's program's.
func (e *commandEnv) checkTask(args []string) []string {
	var problems, named []string
	for i, a := range args {
		if a == "--" {
			if len(named) == 1 {
				if p, ok := e.programOf(".", "./cmd/"+named[0]); ok {
					return append(problems, e.checkProgram(p, args[i+1:])...)
				}
				if p, ok := e.programOf("tools", "./"+named[0]); ok {
					return append(problems, e.checkProgram(p, args[i+1:])...)
				}
			}
			return problems
		}
		if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
			continue
		}
		if !e.tasks[a] {
			problems = append(problems, "Taskfile.yml has no task "+a)
		}
		named = append(named, a)
	}
	return problems
}

var (
	helpFlag      = regexp.MustCompile(`(?:^|[\s\[(|,])-{1,2}([a-z][a-z0-9-]*)`)
	helpValueFlag = regexp.MustCompile(`-{1,2}([a-z][a-z0-9-]*)(?: |=)(?:[A-Z][A-Z0-9_.-]*|[a-z0-9_]+\|[^\s\]]+)`)
	placeholder   = regexp.MustCompile(`^[A-Z][A-Z0-9_-]*$`)
	literalWord   = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

// usage is one usage line of a help text: `bin lit lit PLACEHOLDER [flags]`.
type usage struct {
	literals []string
	args     int // placeholders after the literals
}

// programHelp is what a program's --help says: its usage lines, the flags
// of each (sub)command path that has a help of its own, and which flags
// take a value.
type programHelp struct {
	usages []usage
	flags  map[string]bool
	values map[string]bool
}

func parseHelp(name, text string) programHelp {
	h := programHelp{flags: map[string]bool{"help": true, "version": true}, values: map[string]bool{}}
	for _, m := range helpFlag.FindAllStringSubmatch(text, -1) {
		h.flags[m[1]] = true
	}
	for _, m := range helpValueFlag.FindAllStringSubmatch(text, -1) {
		h.values[m[1]] = true
	}
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "Usage:"))
		if i := strings.Index(l, "  "); i >= 0 {
			l = l[:i] // the description after the usage
		}
		w := strings.Fields(l)
		if len(w) == 0 || w[0] != name {
			continue
		}
		u := usage{}
		lits := true
		for i := 1; i < len(w); i++ {
			tok := w[i]
			bracketed := strings.ContainsAny(tok[:1], "[(")
			tok = strings.Trim(tok, "[]()")
			switch {
			case tok == "" || tok == "|" || tok == "flags":
			case strings.HasPrefix(tok, "-"):
				lits = false
				if i+1 < len(w) && h.values[strings.TrimLeft(strings.SplitN(tok, "=", 2)[0], "-")] {
					i++
				}
			case lits && !bracketed && literalWord.MatchString(tok):
				u.literals = append(u.literals, tok)
			case placeholder.MatchString(tok) || strings.Contains(tok, "..."):
				lits = false
				if !bracketed {
					u.args++
				}
				if strings.Contains(tok, "...") {
					u.args += 1000
				}
			default:
				lits = false
			}
		}
		h.usages = append(h.usages, u)
	}
	return h
}

// checkProgram checks a program's arguments against its help.
func (e *commandEnv) checkProgram(p program, args []string) []string {
	top, err := e.help(p, nil)
	if err != nil {
		return []string{p.name + " --help: " + err.Error()}
	}
	h := parseHelp(p.name, top)
	// A value a subcommand's flag takes is not a positional word either.
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(p.name)+`((?: [a-z][a-z0-9-]*)+) --help`).FindAllStringSubmatch(top, -1) {
		if text, err := e.help(p, strings.Fields(m[1])); err == nil {
			for f := range parseHelp(p.name, text).values {
				h.values[f] = true
			}
		}
	}
	if len(h.usages) == 0 {
		h.usages = []usage{{}}
	}
	// Positional words, flags and alternatives, as the document writes them.
	var pos, flags []string
	for i := 0; i < len(args); i++ {
		a := strings.Trim(args[i], "[]()")
		switch {
		case a == "" || a == "|" || a == "--":
		case strings.HasPrefix(a, "-"):
			f := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
			flags = append(flags, f)
			if !strings.Contains(a, "=") && h.values[f] && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
		default:
			pos = append(pos, a)
		}
	}
	// The subcommand path: the longest run of positional words a usage line
	// starts with; a word a|b|c names each.
	var variants [][]string
	variants = append(variants, nil)
	for _, w := range pos {
		var next [][]string
		for _, v := range variants {
			for _, alt := range strings.Split(w, "|") {
				next = append(next, append(append([]string(nil), v...), alt))
			}
		}
		variants = next
	}
	var problems []string
	var path []string
	for _, v := range variants {
		best, ok := -1, false
		for _, u := range h.usages {
			n := 0
			for n < len(u.literals) && n < len(v) && u.literals[n] == v[n] {
				n++
			}
			switch {
			case n == len(v): // the whole command is (a prefix of) this usage's subcommand
				ok = true
			case n == len(u.literals) && len(v)-n <= u.args:
				ok = true
			}
			if ok && n > best {
				best, path = n, v[:n]
			}
			if ok {
				break
			}
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s %s: no usage line of %s --help takes it", p.name, strings.Join(v, " "), p.name))
		}
	}
	// The flags: the subcommand's own help when the top help names one.
	flagHelp := h
	for n := len(path); n > 0; n-- {
		sub := p.name + " " + strings.Join(path[:n], " ") + " --help"
		if strings.Contains(top, sub) {
			text, err := e.help(p, path[:n])
			if err != nil {
				return append(problems, sub+": "+err.Error())
			}
			flagHelp = parseHelp(p.name, text)
			break
		}
	}
	for _, f := range flags {
		if !flagHelp.flags[f] {
			problems = append(problems, fmt.Sprintf("--%s: not a flag of %s (its --help)", f, strings.Join(append([]string{p.name}, path...), " ")))
		}
	}
	if len(args) == 1 && args[0] == "--version" {
		if out, err := e.run(p, args); err != nil || !strings.HasPrefix(out, p.name+" ") {
			problems = append(problems, fmt.Sprintf("%s --version: %v, %q", p.name, err, out))
		}
	}
	return problems
}

// newRealCommandEnv reads Taskfile.yml and builds, once each, the programs
// the documents name, into a temporary directory.
func newRealCommandEnv(t *testing.T) *commandEnv {
	t.Helper()
	b, err := os.ReadFile("Taskfile.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tasks map[string]any `yaml:"tasks"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	tasks := map[string]bool{}
	for name := range tf.Tasks {
		tasks[name] = true
	}
	// go-task is a tool of the module: `go tool task`.
	goTask := ""
	if out, err := exec.Command("go", "tool", "-n", "task").Output(); err == nil && len(out) > 0 {
		goTask = "task"
	}
	bin := t.TempDir()
	built := map[string]string{}
	helps := map[string]string{}
	build := func(p program) (string, error) {
		key := p.dir + " " + p.pkg
		if exe, ok := built[key]; ok {
			return exe, nil
		}
		exe := filepath.Join(bin, strings.ReplaceAll(filepath.Join(p.dir, p.pkg), string(filepath.Separator), "_"))
		out, err := exec.Command("go", "-C", p.dir, "build", "-o", exe, p.pkg).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go -C %s build %s: %v\n%s", p.dir, p.pkg, err, out)
		}
		built[key] = exe
		return exe, nil
	}
	run := func(p program, args []string) (string, error) {
		exe, err := build(p)
		if err != nil {
			return "", err
		}
		out, err := exec.Command(exe, args...).CombinedOutput()
		return string(out), err
	}
	programOf := func(dir, pkg string) (program, bool) {
		out, err := exec.Command("go", "-C", dir, "list", "-f", "{{.Name}}", pkg).Output()
		if err != nil || strings.TrimSpace(string(out)) != "main" {
			return program{}, false
		}
		return program{name: filepath.Base(pkg), dir: dir, pkg: pkg}, true
	}
	programs := map[string]program{}
	for _, name := range binaries {
		p, ok := programOf(".", "./cmd/"+name)
		if !ok {
			t.Fatalf("./cmd/%s: not a main package", name)
		}
		programs[name] = p
	}
	listed := map[string]error{}
	return &commandEnv{
		tasks:    tasks,
		programs: programs,
		goTask:   goTask,
		help: func(p program, path []string) (string, error) {
			args := append(append([]string(nil), path...), "--help")
			key := p.dir + " " + p.pkg + " " + strings.Join(args, " ")
			if h, ok := helps[key]; ok {
				return h, nil
			}
			out, err := run(p, args)
			if err != nil {
				return "", fmt.Errorf("%v: %s", err, out)
			}
			helps[key] = out
			return out, nil
		},
		run: run,
		packages: func(dir, pattern string) error {
			key := dir + " " + pattern
			if err, ok := listed[key]; ok {
				return err
			}
			out, err := exec.Command("go", "-C", dir, "list", pattern).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%s", strings.TrimSpace(string(out)))
			}
			listed[key] = err
			return err
		},
		funcs: func(dir, pattern, name string) bool {
			files, _ := filepath.Glob(filepath.Join(dir, filepath.FromSlash(pattern), "*_test.go"))
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err == nil && regexp.MustCompile(`(?m)^func `+regexp.QuoteMeta(name)+`\(`).Match(b) {
					return true
				}
			}
			return false
		},
		tools: func(name string) bool {
			return exec.Command("go", "tool", "-n", name).Run() == nil
		},
		programOf: programOf,
	}
}
