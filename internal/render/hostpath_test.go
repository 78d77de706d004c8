package render

import (
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

func TestParseHostPathRoots(t *testing.T) {
	tests := []struct {
		flag    string
		want    []string
		wantErr string
	}{
		{flag: "", want: nil},
		{flag: "/srv/stepwise", want: []string{"/srv/stepwise"}},
		{flag: " /srv/a, /data/b ,,/srv/a", want: []string{"/srv/a", "/data/b"}},
		{flag: "team-a:/srv/team-a,/srv/each", want: []string{"team-a:/srv/team-a", "/srv/each"}},
		{flag: "srv/media", wantErr: `namespace "srv/media"`},
		{flag: "Team_A:/srv/a", wantErr: `namespace "Team_A"`},
		{flag: "team-a:srv", wantErr: `"srv" must be a clean absolute path`},
		{flag: "/srv/media/", wantErr: "must be a clean absolute path"},
		{flag: "/srv/../etc", wantErr: "must be a clean absolute path"},
		{flag: "/", wantErr: `"/" is a system directory`},
		{flag: "team-a:/etc", wantErr: `"/etc" is a system directory`},
		{flag: "/var/lib/stepwise", wantErr: `"/var/lib/stepwise" is a system directory or lies under one`},
		{flag: "/srv/a,/etc", wantErr: `"/etc" is a system directory`},
	}
	for _, tt := range tests {
		got, err := ParseHostPathRoots(tt.flag)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseHostPathRoots(%q) = %v, %v; want error %q", tt.flag, got, err, tt.wantErr)
			}
		case err != nil || !slices.Equal(got, tt.want):
			t.Errorf("ParseHostPathRoots(%q) = %v, %v; want %v", tt.flag, got, err, tt.want)
		}
	}
}

func TestHostPathsAreAllowedPerNamespace(t *testing.T) {
	allowed := []string{"/srv/stepwise", "team-a:/data"}
	tests := []struct {
		root, namespace string
		allowed         []string
		base            string // empty: not allowed
	}{
		{"/srv/stepwise/team-a", "team-a", allowed, "/srv/stepwise/team-a"},
		{"/srv/stepwise/team-a/media", "team-a", allowed, "/srv/stepwise/team-a"},
		{"/data/media", "team-a", allowed, "/data"},
		{"/data", "team-a", allowed, "/data"},
		// Another namespace's directory, or the directory of them all.
		{"/srv/stepwise/team-b/media", "team-a", allowed, ""},
		{"/srv/stepwise", "team-a", allowed, ""},
		{"/data/media", "team-b", allowed, ""},
		{"/srv/stepwise/team-a-other", "team-a", allowed, ""},
		{"/srv", "team-a", allowed, ""},
		{"/srv/stepwise/team-a/../team-b", "team-a", allowed, ""},
		{"/srv/stepwise/team-a/", "team-a", allowed, ""},
		{"/srv/stepwise/team-a", "team-a", nil, ""},
		{"/srv/stepwise/team-a", "", allowed, ""},
		// An allow-list that names a system directory, built by hand rather
		// than by ParseHostPathRoots, still allows nothing there.
		{"/etc/media", "team-a", []string{"team-a:/etc"}, ""},
		{"/var/lib/kubelet", "team-a", []string{"team-a:/"}, ""},
	}
	for _, tt := range tests {
		base, ok := HostPathBase(tt.root, tt.namespace, tt.allowed)
		if ok != (tt.base != "") || base != tt.base {
			t.Errorf("HostPathBase(%q, %q, %v) = %q, %v; want %q", tt.root, tt.namespace, tt.allowed, base, ok, tt.base)
		}
	}
}

func TestCheckMediaStore(t *testing.T) {
	local := func(root, claim string) *agentsv1.MediaStore {
		return &agentsv1.MediaStore{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"}, Spec: agentsv1.MediaStoreSpec{
			LocalDirectory: &agentsv1.LocalDirectoryMediaStore{Root: root, PersistentVolumeClaimName: claim}}}
	}
	tests := []struct {
		name        string
		store       *agentsv1.MediaStore
		roots       []string
		wantMessage string // empty: usable
	}{
		{name: "S3 needs no host directory", store: &agentsv1.MediaStore{Spec: agentsv1.MediaStoreSpec{S3: &agentsv1.S3MediaStore{Bucket: "b"}}}},
		{name: "a claim needs no host directory", store: local("/srv/media", "media")},
		{name: "a hostPath under the namespace's directory", store: local("/srv/stepwise/team-a/media", ""), roots: []string{"/srv/stepwise"}},
		{name: "a hostPath under another namespace's directory", store: local("/srv/stepwise/team-b/media", ""), roots: []string{"/srv/stepwise", "team-b:/data"},
			wantMessage: "(the operator allows namespace team-a /srv/stepwise/team-a)"},
		{name: "a hostPath with no roots allowed", store: local("/srv/media", ""),
			wantMessage: "spec.localDirectory.root: /srv/media would be mounted from the node (hostPath) because spec.localDirectory.persistentVolumeClaimName is not set, " +
				"and it is not a host directory the operator allows (the operator allows namespace team-a none); use a PersistentVolumeClaim, " +
				"or ask the operator's administrator to allow this directory with --media-host-path-roots"},
		{name: "a hostPath outside the allowed roots", store: local("/srv/media", ""), roots: []string{"/srv/stepwise", "/data"},
			wantMessage: "(the operator allows namespace team-a /srv/stepwise/team-a, /data/team-a)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := CheckMediaStore(tt.store, tt.roots)
			switch {
			case tt.wantMessage == "" && b != nil:
				t.Errorf("CheckMediaStore() = %v, want usable", b)
			case tt.wantMessage != "" && (b == nil || b.Reason != agentsv1.ReasonHostPathNotAllowed || !strings.Contains(b.Message, tt.wantMessage)):
				t.Errorf("CheckMediaStore() = %v, want %s with %q", b, agentsv1.ReasonHostPathNotAllowed, tt.wantMessage)
			}
		})
	}
}

// TestWorkerNeverMountsAnUnallowedHostPath builds the Resolved input by
// hand, as a Resolve with a mistake would, and checks that Worker itself
// refuses to mount the node's directory or a system path.
func TestWorkerNeverMountsAnUnallowedHostPath(t *testing.T) {
	store := func(root, claim string) *agentsv1.MediaStore {
		return readyMediaStore("media", func(ms *agentsv1.MediaStore) {
			ms.Spec.LocalDirectory = &agentsv1.LocalDirectoryMediaStore{Root: root, PersistentVolumeClaimName: claim}
		})
	}
	tests := []struct {
		name  string
		store *agentsv1.MediaStore
		roots []string
	}{
		{"no host directory allowed", store("/media", ""), nil},
		{"outside the allowed host directories", store("/srv/media", ""), []string{"/media"}},
		{"a system directory an allow-list names", store("/etc", ""), []string{"/etc"}},
		{"a system directory under the whole file system", store("/var/lib/kubelet", ""), []string{"/"}},
		{"a system directory as a claim's mount path", store("/usr/bin", "media"), nil},
		{"a path that is not clean", store("/media/../etc", ""), []string{"/media"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Resolved{Agent: testAgent(withMediaStoreRef("media")), Engine: agentsv1.EngineSpec{Address: "temporal:7233", Namespace: "default"},
				MediaStore: tt.store, MediaHostPathRoots: tt.roots, WorkerImage: "w", EngineVersion: "0.1.0"}
			w, err := Worker(r)
			var b *Blocker
			if err == nil || !errors.As(err, &b) || b.Reason != agentsv1.ReasonMediaStoreNotReady {
				t.Fatalf("Worker() = %v, %v; want a MediaStoreNotReady blocker and no objects", w, err)
			}
		})
	}
}
