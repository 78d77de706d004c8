package media

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The node's directories as a hostPath store would see them: an allowed
// directory per namespace, and a team that writes links in its own store.
func TestCheckRootRefusesALinkAnywhereBelowTheAllowedDirectory(t *testing.T) {
	node := t.TempDir()
	mkdir := func(p string) string {
		t.Helper()
		full := filepath.Join(node, p)
		if err := os.MkdirAll(full, 0o755); err != nil {
			t.Fatal(err)
		}
		return full
	}
	teamA, teamB := mkdir("media/team-a"), mkdir("media/team-b")
	mkdir("media/team-a/store/images")
	mkdir("media/team-b/secret-store")
	// team-a links, inside its own store, to team-b's.
	if err := os.Symlink(filepath.Join(teamB, "secret-store"), filepath.Join(teamA, "store", "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(teamA, "store", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, rel, mounted, wantErr string
	}{
		{"the store itself", "store", filepath.Join(teamA, "store"), ""},
		{"a directory in the store", "store/images", filepath.Join(teamA, "store/images"), ""},
		{"the allowed directory itself", "", teamA, ""},
		// The kubelet followed the link on the node: the mount is team-b's.
		{"a link to another namespace's store", "store/b", filepath.Join(teamB, "secret-store"), `component "store/b" of the store's root is a symbolic link`},
		{"a file on the way", "store/file", filepath.Join(teamA, "store/file"), "is not a directory"},
		{"a missing component", "store/none", filepath.Join(teamA, "store"), `component "store/none"`},
		{"a path that climbs", "store/../../team-b", teamB, "not a clean path"},
		// A link the attacker swapped for a real directory after the mount.
		{"a directory other than the one mounted", "store/images", filepath.Join(teamB, "secret-store"), "is not the one its root names"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckRoot(teamA, c.rel, c.mounted)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("CheckRoot(%q) = %v", c.rel, err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("CheckRoot(%q) = %v, want an error with %q", c.rel, err, c.wantErr)
			}
		})
	}
}
