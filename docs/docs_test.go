// Package docs holds the project's pages by subject; its tests keep them
// walkable: every relative link and anchor resolves, every page is linked
// from the README, and the README's architecture map lists exactly the
// module's packages.
package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, from this package's directory.
const root = ".."

// skipped are the directories no page or package lives in: build outputs,
// local state, and the pinned tool modules, each a module of its own.
var skipped = map[string]bool{".git": true, "bin": true, ".local": true, "node_modules": true, "testdata": true}

// pages returns the Markdown files the checks cover: every README and
// everything under docs/, relative to root.
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skipped[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "README.md" || (filepath.Dir(rel) == "docs" && strings.HasSuffix(rel, ".md")) {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// prose returns a page's lines outside fenced code blocks, with inline code
// removed, numbered from one.
func prose(text string) map[int]string {
	lines := outsideFences(text)
	for n, line := range lines {
		lines[n] = inlineCode.ReplaceAllString(line, "")
	}
	return lines
}

// outsideFences returns a page's lines outside fenced code blocks,
// numbered from one.
func outsideFences(text string) map[int]string {
	lines := map[int]string{}
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if !inFence {
			lines[i+1] = line
		}
	}
	return lines
}

// anchors returns the anchors of a page's headings as GitHub makes them:
// lower case, punctuation but hyphens and underscores dropped, spaces as
// hyphens, and repeats numbered.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := outsideFences(text)
	numbers := make([]int, 0, len(lines))
	for n := range lines {
		numbers = append(numbers, n)
	}
	sort.Ints(numbers)
	for _, n := range numbers {
		m := heading.FindStringSubmatch(lines[n])
		if m == nil {
			continue
		}
		slug := slugify(m[1])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func slugify(title string) string {
	title = strings.NewReplacer("`", "", "*", "").Replace(title)
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestEveryLinkResolves checks every relative link of the pages: the file
// or directory exists inside the repository, and an anchor names a heading
// of the page it points at. Addresses outside the repository are not
// fetched.
func TestEveryLinkResolves(t *testing.T) {
	texts := map[string]string{}
	read := func(rel string) (string, error) {
		if text, ok := texts[rel]; ok {
			return text, nil
		}
		raw, err := os.ReadFile(filepath.Join(root, rel))
		texts[rel] = string(raw)
		return string(raw), err
	}
	checked := 0
	for _, page := range pages(t) {
		text, err := read(page)
		if err != nil {
			t.Fatal(err)
		}
		lines := prose(text)
		numbers := make([]int, 0, len(lines))
		for n := range lines {
			numbers = append(numbers, n)
		}
		sort.Ints(numbers)
		for _, n := range numbers {
			for _, m := range link.FindAllStringSubmatch(lines[n], -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, anchor, _ := strings.Cut(target, "#")
				rel := page
				if path != "" {
					rel = filepath.Clean(filepath.Join(filepath.Dir(page), path))
					if rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(path) {
						t.Errorf("%s:%d: %s points outside the repository", page, n, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
						t.Errorf("%s:%d: %s: no such file or directory", page, n, target)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(rel, ".md") {
					t.Errorf("%s:%d: %s: an anchor into a file that is not a page", page, n, target)
					continue
				}
				targetText, err := read(rel)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(targetText)[anchor] {
					t.Errorf("%s:%d: %s: %s has no heading with the anchor %q", page, n, target, rel, anchor)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the pages moved?")
	}
}

// TestEveryPageIsLinkedFromTheReadme keeps every page reachable from the
// first thing a newcomer reads.
func TestEveryPageIsLinkedFromTheReadme(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, line := range prose(string(readme)) {
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			path, _, _ := strings.Cut(m[1], "#")
			linked[filepath.Clean(path)] = true
		}
	}
	for _, page := range pages(t) {
		if page != "README.md" && !linked[page] {
			t.Errorf("the README links nowhere to %s", page)
		}
	}
}

// TestTheArchitectureMapListsEveryPackage checks the README's map against
// the module: every directory with Go files is on it, and everything on it
// exists.
func TestTheArchitectureMapListsEveryPackage(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	entries := mapEntries(t, string(readme))
	for entry := range entries {
		if info, err := os.Stat(filepath.Join(root, entry)); err != nil || !info.IsDir() {
			t.Errorf("the architecture map lists %s/, which is not a directory", entry)
		}
	}
	for _, pkg := range packages(t) {
		if !entries[pkg] {
			t.Errorf("the architecture map does not list the package %s/", pkg)
		}
	}
}

// mapEntries reads the fenced block under the README's Architecture
// heading: lines that start with two spaces and a directory ending in a
// slash are its entries; others are layer titles.
func mapEntries(t *testing.T, readme string) map[string]bool {
	t.Helper()
	_, after, ok := strings.Cut(readme, "\n## Architecture\n")
	if !ok {
		t.Fatal("the README has no Architecture section")
	}
	_, block, ok := strings.Cut(after, "```text\n")
	if !ok {
		t.Fatal("the README's Architecture section has no map in a text block")
	}
	block, _, _ = strings.Cut(block, "```")
	entries := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		if !strings.HasPrefix(line, "  ") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasSuffix(fields[0], "/") {
			t.Errorf("the map's line %q names no directory", line)
			continue
		}
		entry := strings.TrimSuffix(fields[0], "/")
		if entries[entry] {
			t.Errorf("the map lists %s/ twice", entry)
		}
		entries[entry] = true
	}
	if len(entries) == 0 {
		t.Fatal("the architecture map has no entries")
	}
	return entries
}

// packages returns every directory of the module with Go files in it, as
// go list ./... would find them: the pinned tool modules under hack/tools
// have their own go.mod and are not the module's.
func packages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skipped[d.Name()] || strings.HasPrefix(d.Name(), "_") {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") && (len(out) == 0 || out[len(out)-1] != filepath.Dir(rel)) {
			out = append(out, filepath.Dir(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 40 {
		t.Fatalf("found only %d packages: the walk is wrong", len(out))
	}
	return out
}
