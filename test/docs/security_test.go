package docs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/loraplane/loraplane/test/testenv"
)

// roleFiles are the generated roles (make manifests) and the ones deploy/ ships by hand.
var roleFiles = []string{
	"deploy/adapter-controller/rbac/role.yaml",
	"deploy/router-controller/rbac/role.yaml",
	"deploy/chart/loraplane/files/adapter-cleanup-role.yaml",
	"deploy/prometheus/rbac.yaml",
	"deploy/prometheus/discovery.yaml",
}

// docItem is a unit a rule is documented in: a table row, or a paragraph or list item (its
// wrapped lines joined), with the heading of its section.
type docItem struct{ heading, text string }

// docItems splits markdown into items.
func docItems(md string) []docItem {
	var items []docItem
	var heading string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			items = append(items, docItem{heading, strings.Join(cur, " ")})
			cur = nil
		}
	}
	for _, line := range strings.Split(md, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "#"):
			flush()
			heading = t
		case strings.HasPrefix(t, "|"):
			flush()
			items = append(items, docItem{heading, t})
		case t == "":
			flush()
		case strings.HasPrefix(t, "- "):
			flush()
			cur = append(cur, t)
		default:
			cur = append(cur, t)
		}
	}
	flush()
	return items
}

// about keeps the items that document the role: those under a heading naming it ("Role
// `name`" or "ClusterRole `name`", the kind told apart) and those naming it themselves.
func about(items []docItem, kind, name string) []string {
	var out []string
	for _, it := range items {
		h := strings.ReplaceAll(it.heading, "ClusterRole `", "ClusterRole·`")
		if strings.Contains(h, map[string]string{"Role": "Role `", "ClusterRole": "ClusterRole·`"}[kind]+name+"`") ||
			strings.Contains(it.text, "`"+name+"`") {
			out = append(out, it.text)
		}
	}
	return out
}

// documented reports whether one item names the resource (in backticks) and every verb.
func documented(items []string, resource string, verbs []string) bool {
	for _, it := range items {
		if !strings.Contains(it, "`"+resource+"`") {
			continue
		}
		all := true
		for _, v := range verbs {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(v) + `\b`).MatchString(it) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// TestSecurityDocListsEveryRule: docs/security.md names every Role and ClusterRole the
// repository generates or ships, and for each of their rules lists the resource (or
// non-resource URL) with all its verbs in one table row, paragraph or list item of that
// role's section (or one naming the role).
func TestSecurityDocListsEveryRule(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	items := docItems(string(md))
	rules := 0
	for _, f := range roleFiles {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var role rbacv1.ClusterRole // a Role has the same fields
			if err := dec.Decode(&role); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if role.Kind != "Role" && role.Kind != "ClusterRole" {
				continue
			}
			own := about(items, role.Kind, role.Name)
			if len(own) == 0 {
				t.Errorf("docs/security.md does not name %s %s (%s)", role.Kind, role.Name, f)
			}
			for _, r := range role.Rules {
				rules++
				for _, res := range append(append([]string{}, r.Resources...), r.NonResourceURLs...) {
					if !documented(own, res, r.Verbs) {
						t.Errorf("docs/security.md does not list %s %s's rule on %s with verbs %v (%s)", role.Kind, role.Name, res, r.Verbs, f)
					}
				}
			}
		}
	}
	if rules == 0 {
		t.Fatal("no rules read")
	}
	t.Logf("%d rules of %d files documented", rules, len(roleFiles))
}
