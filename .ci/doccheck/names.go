package main

import (
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// The repository's own module path: a cited name that starts with it is
// looked up in the repository.
const modulePath = "github.com/msl-armory/pool"

var (
	// fileName matches a token that names a file: a path, possibly with
	// folders and * wildcards, ending in one of the extensions below. The
	// extensions are those of files a comment or a document may point a
	// reader at; the short ones a Go expression could end in (.s, .c, .h:
	// r.s is a field) are left out.
	fileName = regexp.MustCompile(`[\w$@~+./*-]*[\w*-]\.(?:go|md|sh|bash|json|txt|png|jpg|jpeg|gif|svg|mod|sum|work|yaml|yml|toml|csv|html|proto|pem|pprof|patch|diff)\b`)
	// machinePath matches an absolute path into a directory that exists
	// on some machines and not others: home and work directories, scratch
	// space, mounts; and a Windows path with a drive letter. A reader's
	// machine does not have it, and it says where one author kept things.
	machinePath = regexp.MustCompile(`(?:^|[^\w.~$/-])((?:/(?:work|workspace|home|tmp|root|Users|mnt|opt|srv|scratch|private|var/folders)\b|[A-Za-z]:\\|[A-Za-z]:/(?:Users|Windows)\b)[^\s"'` + "`" + `)\]>,;]*)`)
	// anyURL matches a URL, whose path is not a file of the repository.
	anyURL = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s)>\]"'` + "`" + `]*`)
	// domain matches the first element of a module path: a host name.
	domain = regexp.MustCompile(`^[a-z0-9-]+(?:\.[a-z0-9-]+)+$`)
)

// checkNames reads every Go comment (tests and every module included) and
// every line of every markdown file (prose, links and code blocks) under
// root, and reports
//
//   - a cited file name that the repository does not have, and
//   - an absolute path on one machine (see machinePath).
//
// A cited name is found when
//
//   - it exists at that path from the repository's root or from the citing
//     file's folder;
//   - given without a folder, a file of that name exists anywhere in the
//     repository ("_test.go", a suffix: when some file ends with it);
//   - it exists under $(go env GOROOT)/src, the standard library's sources
//     ("sync/poolqueue.go"; "$(go env GOROOT)/src/..." is read as such);
//   - it is named with the module it belongs to, a path whose first element
//     is a host name ("golang.org/x/sync/semaphore/semaphore.go",
//     "github.com/jackc/puddle/v2@v2.2.3/pool.go"): another repository's
//     file, not checked; or
//   - a command in the same markdown code block writes it (the target of a
//     redirection, tee or -o).
//
// Wildcards match as path.Match does; a placeholder such as <name>.txt is
// no name. The .git folder is not read.
func checkNames(root string) ([]string, error) {
	idx, err := indexTree(root)
	if err != nil {
		return nil, err
	}
	idx.goroot = goroot()

	var problems []string
	for _, rel := range idx.files {
		var lines []line
		var written []map[string]bool // by line: names its code block writes
		switch {
		case strings.HasSuffix(rel, ".go"):
			lines, err = goCommentLines(filepath.Join(root, rel))
		case strings.HasSuffix(rel, ".md"):
			var all []string
			all, err = readLines(filepath.Join(root, rel))
			for i, text := range all {
				lines = append(lines, line{i + 1, text})
			}
			written = writtenByBlock(all)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		for i, l := range lines {
			var w map[string]bool
			if written != nil {
				w = written[i]
			}
			for _, p := range idx.checkLine(rel, l.text, w) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, l.n, p))
			}
		}
	}
	return problems, nil
}

// tree is what checkNames knows of the repository.
type tree struct {
	root   string
	files  []string        // every file, slash-separated, relative to root, in walk order
	paths  map[string]bool // files and folders, slash-separated, relative to root
	bases  map[string]bool // the files' base names
	goroot string          // "" when the go command could not say
}

func indexTree(root string) (*tree, error) {
	t := &tree{root: root, paths: map[string]bool{}, bases: map[string]bool{}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		t.paths[rel] = true
		if !d.IsDir() {
			t.files = append(t.files, rel)
			t.bases[d.Name()] = true
		}
		return nil
	})
	return t, err
}

// goroot returns $(go env GOROOT), or "" when the go command fails; then
// no name is found there.
func goroot() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "doccheck: go env GOROOT:", err)
		return ""
	}
	return strings.TrimSpace(string(out))
}

// goCommentLines returns the lines of the comments of a Go file, each with
// its line number. The file need not compile: it is only tokenized.
func goCommentLines(file string) ([]line, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile(file, -1, len(src)), src, func(token.Position, string) {}, scanner.ScanComments)
	var out []line
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out, nil
		}
		if tok != token.COMMENT {
			continue
		}
		n := fset.Position(pos).Line
		for i, text := range strings.Split(lit, "\n") {
			out = append(out, line{n + i, text})
		}
	}
}

// outputFile matches a file that a shell command writes: a redirection's
// target, tee's, or the argument of -o.
var outputFile = regexp.MustCompile(`(?:>>?|\btee(?:\s+-a)?\s|\s-o\s)\s*([^\s;|&)]+)`)

// writtenByBlock returns, for each line of a markdown file, the names of
// the files that the commands of its fenced code block write (nil outside
// a block): a block that makes a file may name it, before and after.
func writtenByBlock(lines []string) []map[string]bool {
	out := make([]map[string]bool, len(lines))
	start, open := -1, ""
	for i, text := range lines {
		m := fence.FindStringSubmatch(text)
		switch {
		case m != nil && open == "":
			start, open = i, m[1]
		case m != nil && m[1] == open:
			w := map[string]bool{}
			for _, l := range lines[start:i] {
				for _, f := range outputFile.FindAllStringSubmatch(l, -1) {
					w[f[1]] = true
				}
			}
			for j := start; j < i; j++ {
				out[j] = w
			}
			open = ""
		}
	}
	return out
}

// checkLine returns what is wrong with the names that one line of file
// (slash-separated, relative to the root) cites; written are names that
// the line's code block makes, and so need not exist.
func (t *tree) checkLine(file, text string, written map[string]bool) []string {
	text = strings.NewReplacer("$(go env GOROOT)", "$GOROOT", "${GOROOT}", "$GOROOT",
		"$(go env GOMODCACHE)", "$GOMODCACHE", "${GOMODCACHE}", "$GOMODCACHE").Replace(text)
	text = anyURL.ReplaceAllString(text, " ")
	var out []string
	for _, m := range machinePath.FindAllStringSubmatchIndex(text, -1) {
		p := strings.TrimRight(text[m[2]:m[3]], ".:")
		out = append(out, fmt.Sprintf("%q: an absolute path, which only one machine has", p))
	}
	// Blank the paths out, so that their file names are not reported again.
	text = machinePath.ReplaceAllStringFunc(text, func(s string) string { return strings.Repeat(" ", len(s)) })
	for _, name := range fileName.FindAllString(text, -1) {
		if !written[name] && !t.found(file, name) {
			out = append(out, fmt.Sprintf("%q: no such file in the repository (nor under $(go env GOROOT)/src)", name))
		}
	}
	return out
}

// found reports whether the name that file cites exists, by checkNames'
// rules.
func (t *tree) found(file, name string) bool {
	switch {
	case strings.HasPrefix(name, "$GOROOT/"):
		return t.inGoroot(strings.TrimPrefix(strings.TrimPrefix(name, "$GOROOT/"), "src/"))
	case strings.HasPrefix(name, "$GOMODCACHE/"):
		return true // another module's file, named with its module
	case strings.HasPrefix(name, modulePath+"/"):
		return t.inRepo(strings.TrimPrefix(name, modulePath+"/"))
	case strings.HasPrefix(name, "/"):
		return t.inRepo(strings.TrimLeft(name, "/")) // as GitHub reads a link: from the root
	}
	first, _, hasDir := strings.Cut(name, "/")
	if hasDir && domain.MatchString(strings.SplitN(first, "@", 2)[0]) {
		return true // another module's file, named with its module
	}
	if !hasDir {
		if strings.HasPrefix(name, "_") {
			for _, f := range t.files {
				if strings.HasSuffix(f, name) {
					return true
				}
			}
			return false
		}
		if !strings.Contains(name, "*") && t.bases[name] {
			return true
		}
	}
	dir := path.Dir(file)
	return t.inRepo(name) || t.inRepo(path.Join(dir, name)) || t.inGoroot(name)
}

// inRepo reports whether the repository has the file or folder at rel, a
// slash-separated path from the root that may hold wildcards.
func (t *tree) inRepo(rel string) bool {
	rel = path.Clean(rel)
	if strings.HasPrefix(rel, "../") || rel == ".." {
		return false
	}
	if !strings.ContainsAny(rel, "*?[") {
		return t.paths[rel]
	}
	for p := range t.paths {
		if ok, _ := path.Match(rel, p); ok {
			return true
		}
	}
	return false
}

// inGoroot reports whether $(go env GOROOT)/src has the file at rel.
func (t *tree) inGoroot(rel string) bool {
	if t.goroot == "" || strings.HasPrefix(path.Clean(rel), "..") {
		return false
	}
	full := filepath.Join(t.goroot, "src", filepath.FromSlash(rel))
	if strings.ContainsAny(rel, "*?[") {
		m, _ := filepath.Glob(full)
		return len(m) > 0
	}
	_, err := os.Stat(full)
	return err == nil
}
