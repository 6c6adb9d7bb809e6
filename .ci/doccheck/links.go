package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

var (
	// inlineLink matches the target of an inline link or image:
	// [text](target "title") and ![alt](target).
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef matches a link reference definition, [name]: target; not a
	// footnote, [^name]: text.
	refDef = regexp.MustCompile(`^ {0,3}\[([^\]^][^\]]*)\]:\s*<?([^\s>]+)>?`)
	// htmlLink matches the target of an HTML link or image.
	htmlLink = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]+)"`)
	// htmlAnchor matches an HTML element that a link can point at.
	htmlAnchor = regexp.MustCompile(`(?i)<a\s[^>]*\b(?:name|id)\s*=\s*"([^"]+)"`)
	// scheme matches the start of an absolute URL.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// atxHeading matches "## Heading ##".
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:\s+(.*?))?(?:\s+#+)?\s*$`)
	// setextUnderline matches the line under a setext heading.
	setextUnderline = regexp.MustCompile(`^ {0,3}(?:=+|-+)\s*$`)
	// fence matches the opening or closing line of a fenced code block.
	fence = regexp.MustCompile("^ {0,3}(```|~~~)")
)

// checkLinks reports every relative link in the markdown files that does
// not resolve: to a file or directory that does not exist, or, for a
// #fragment into a markdown file (or into the same file), to a heading that
// does not exist there, by GitHub's anchor rules. Absolute URLs are not
// checked.
func checkLinks(files []string) ([]string, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("links: no files given")
	}
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) (map[string]bool, error) {
		path = filepath.Clean(path)
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		a, err := headingAnchors(path)
		anchors[path] = a
		return a, err
	}

	var problems []string
	for _, file := range files {
		lines, err := readLines(file)
		if err != nil {
			return nil, err
		}
		for _, l := range outsideCode(lines) {
			for _, target := range linkTargets(l.text) {
				if p := checkTarget(file, target, anchorsOf); p != "" {
					problems = append(problems, fmt.Sprintf("%s:%d: %s", file, l.n, p))
				}
			}
		}
	}
	return problems, nil
}

// checkTarget returns what is wrong with a link to target in file, or "".
func checkTarget(file, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // absolute: not checked
	}
	pathPart, frag, _ := strings.Cut(target, "#")
	path, err := url.PathUnescape(pathPart)
	if err != nil {
		return fmt.Sprintf("link %q: %v", target, err)
	}
	resolved := file
	if path != "" {
		if strings.HasPrefix(path, "/") {
			resolved = filepath.Join(repoRoot(), path) // GitHub: from the repository root
		} else {
			resolved = filepath.Join(filepath.Dir(file), path)
		}
		if _, err := os.Stat(resolved); err != nil {
			return fmt.Sprintf("link %q: %s does not exist", target, resolved)
		}
	}
	if frag == "" || !strings.EqualFold(filepath.Ext(resolved), ".md") {
		return ""
	}
	a, err := anchorsOf(resolved)
	if err != nil {
		return fmt.Sprintf("link %q: %v", target, err)
	}
	if frag, err = url.PathUnescape(frag); err != nil || !a[frag] {
		return fmt.Sprintf("link %q: %s has no heading with the anchor #%s", target, resolved, frag)
	}
	return ""
}

// repoRoot is the directory a link starting with "/" is relative to: the
// working directory, which check-docs sets to the repository's root.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	return wd
}

// linkTargets returns the targets of the links in one line of markdown.
func linkTargets(line string) []string {
	line = stripCodeSpans(line)
	var out []string
	for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
		out = append(out, m[1])
	}
	if m := refDef.FindStringSubmatch(line); m != nil {
		out = append(out, m[2])
	}
	for _, m := range htmlLink.FindAllStringSubmatch(line, -1) {
		out = append(out, m[1])
	}
	return out
}

// stripCodeSpans replaces each inline code span by "code", so that
// brackets and parentheses inside one are not read as a link.
func stripCodeSpans(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		n := i
		for n < len(s) && s[n] == '`' {
			n++
		}
		run := s[i:n]
		j := strings.Index(s[n:], run)
		if j < 0 { // unmatched: literal backticks
			b.WriteString(s[:n])
			s = s[n:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteString("code")
		s = s[n+j+len(run):]
	}
}

type line struct {
	n    int // 1-based
	text string
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

// outsideCode returns the lines that are not inside a fenced code block.
func outsideCode(lines []string) []line {
	var out []line
	open := "" // the fence of the block we are in
	for i, text := range lines {
		if m := fence.FindStringSubmatch(text); m != nil {
			switch {
			case open == "":
				open = m[1]
				continue
			case m[1] == open:
				open = ""
				continue
			}
		}
		if open == "" {
			out = append(out, line{i + 1, text})
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a
// markdown file, and those of its HTML anchors.
func headingAnchors(path string) (map[string]bool, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	add := func(heading string) {
		slug := slugify(heading)
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	code := outsideCode(lines)
	for i, l := range code {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l.text, -1) {
			anchors[m[1]] = true
		}
		if m := atxHeading.FindStringSubmatch(l.text); m != nil {
			add(m[1])
			continue
		}
		// A setext heading: a paragraph line with === or --- under it.
		if i+1 < len(code) && code[i+1].n == l.n+1 && setextUnderline.MatchString(code[i+1].text) &&
			strings.TrimSpace(l.text) != "" && !atxHeading.MatchString(l.text) && !setextUnderline.MatchString(l.text) {
			add(l.text)
		}
	}
	return anchors, nil
}

var (
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// slugify is GitHub's anchor for a heading: its text as rendered,
// lowercased, with every character but letters, digits, '_', '-' and
// spaces dropped, and spaces turned into '-'.
func slugify(heading string) string {
	text := mdLinkText.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
