package media

import "testing"

func TestIsSystemPath(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"/", true},
		{"/etc", true},
		{"/etc/stepwise/worker", true},
		{"/proc/1/root", true},
		{"/root", true},
		{"/var/lib/kubelet", true},
		{"/var/lib/stepwise/media", true},
		{"/var/run", true},
		{"/usr/bin", true},
		{"/tmp", true},
		{"/tmp/media", true},
		{"/lib", true},
		{"/lib64", true},
		{"/libexec/x", true},
		{"/home/alice/media", true},
		{"/srv/media", false},
		{"/data", false},
		{"/mnt/images", false},
		{"/etcetera", false},
		{"/variable", false},
		{"/srv/etc", false},
		{"/srv/lib", false},
	}
	for _, tt := range tests {
		if got := IsSystemPath(tt.path); got != tt.want {
			t.Errorf("IsSystemPath(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestIsCleanAbsolutePath(t *testing.T) {
	for p, want := range map[string]bool{
		"/srv/media": true, "/": true,
		"srv/media": false, "/srv/media/": false, "/srv//media": false, "/srv/./media": false,
		"/srv/../etc": false, "/srv/media/.": false, "": false,
	} {
		if got := IsCleanAbsolutePath(p); got != want {
			t.Errorf("IsCleanAbsolutePath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestIsUnder(t *testing.T) {
	for _, tt := range []struct {
		p, dir string
		want   bool
	}{
		{"/srv/media", "/srv/media", true},
		{"/srv/media/a", "/srv/media", true},
		{"/srv/media-2", "/srv/media", false},
		{"/srv", "/srv/media", false},
		{"/anything", "/", true},
	} {
		if got := IsUnder(tt.p, tt.dir); got != tt.want {
			t.Errorf("IsUnder(%q, %q) = %v, want %v", tt.p, tt.dir, got, tt.want)
		}
	}
}
