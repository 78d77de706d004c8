package localstore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/localstore"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
)

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

func TestPutCreatesAndSyncs(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	root := filepath.Join(base, "shared media", "é")
	store, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := "file://" + strings.ReplaceAll(base, " ", "%20") + "/shared%20media/%C3%A9"; store.StoreURI() != want {
		t.Fatalf("StoreURI = %s, want %s", store.StoreURI(), want)
	}
	var mu sync.Mutex
	var syncs []string
	store.WatchSyncs(func(p string) {
		mu.Lock()
		syncs = append(syncs, p)
		mu.Unlock()
	})
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := syncs
		syncs = nil
		return out
	}

	png := mediatest.PNG(6, 6, 1)
	ref, err := store.PutImage(ctx, png)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "sha256", ref.SHA256)
	if ref.URI != store.StoreURI()+"/sha256/"+ref.SHA256 {
		t.Errorf("URI %s", ref.URI)
	}
	got, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(got, png) {
		t.Fatalf("image file: %v", err)
	}
	for p, want := range map[string]os.FileMode{
		filepath.Join(base, "shared media"): os.ModeDir | 0o700,
		root:                                os.ModeDir | 0o700,
		filepath.Join(root, "sha256"):       os.ModeDir | 0o700,
		file:                                0o600,
	} {
		if m := mode(t, p); m != want {
			t.Errorf("%s has mode %v, want %v", p, m, want)
		}
	}
	// Each directory made is followed by a sync of its parent; the file is
	// synced before its rename; then the image directory, root and parent.
	parent := filepath.Join(base, "shared media")
	want := []string{base, parent, root, "<temporary file>", filepath.Join(root, "sha256"), root, parent}
	gotSyncs := take()
	if len(gotSyncs) == len(want) && strings.Contains(gotSyncs[3], "/sha256/.tmp-") {
		gotSyncs[3] = "<temporary file>"
	}
	if strings.Join(gotSyncs, "\n") != strings.Join(want, "\n") {
		t.Errorf("synced\n%s\nwant\n%s", strings.Join(gotSyncs, "\n"), strings.Join(want, "\n"))
	}

	// The same bytes again: nothing written, the same file, still synced.
	before, _ := os.Stat(file)
	if again, err := store.PutImage(ctx, png); err != nil || again != ref {
		t.Fatalf("second upload: %v", err)
	}
	after, _ := os.Stat(file)
	if !os.SameFile(before, after) {
		t.Error("an identical image was written again")
	}
	if got := take(); strings.Join(got, ",") != strings.Join([]string{filepath.Join(root, "sha256"), root, parent}, ",") {
		t.Errorf("second upload synced %v", got)
	}

	// Many writers of one new image at once leave one file and no
	// temporary ones.
	gif := mediatest.GIF(9, 9, 3)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := store.PutImage(ctx, gif); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	entries, err := os.ReadDir(filepath.Join(root, "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("image directory holds %v", names)
	}

	// A file under the image's name with other bytes is replaced.
	if err := os.WriteFile(file, bytes.Repeat([]byte{1}, 10), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutImage(ctx, png); err != nil {
		t.Fatal(err)
	}
	if got, err := store.GetImage(ctx, ref); err != nil || !bytes.Equal(got, png) {
		t.Errorf("after replacing a damaged file: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "media")
	store, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	png := mediatest.PNG(5, 5, 5)
	ref, err := store.PutImage(ctx, png)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "sha256", ref.SHA256)
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, png, 0o600); err != nil {
		t.Fatal(err)
	}
	replace := func(make func(p string) error) {
		t.Helper()
		if err := os.RemoveAll(file); err != nil {
			t.Fatal(err)
		}
		if err := make(file); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		setup func(p string) error
		want  string
		put   bool // PutImage refuses it too
	}{
		{"symbolic link", func(p string) error { return os.Symlink(outside, p) }, "symbolic link", true},
		{"FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file", true},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) }, "not a regular file", true},
		{"second hard link", func(p string) error {
			if err := os.WriteFile(p, png, 0o600); err != nil {
				return err
			}
			return os.Link(p, filepath.Join(filepath.Dir(p), "copy"))
		}, "2 hard links", true},
		{"one byte more", func(p string) error { return os.WriteFile(p, append(bytes.Clone(png), 0), 0o600) }, "bytes, the reference has", false},
		{"same size, other bytes", func(p string) error {
			changed := bytes.Clone(png)
			changed[len(changed)-6] ^= 0xFF
			return os.WriteFile(p, changed, 0o600)
		}, "SHA-256", false},
	}
	for _, tt := range tests {
		replace(tt.setup)
		done := make(chan error, 1)
		go func() {
			_, err := store.GetImage(ctx, ref)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: GetImage = %v, want a store error with %q", tt.name, err, tt.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: GetImage blocked", tt.name)
		}
		if tt.put {
			if _, err := store.PutImage(ctx, png); !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: PutImage = %v, want a store error with %q", tt.name, err, tt.want)
			}
		}
		_ = os.Remove(filepath.Join(root, "sha256", "copy"))
	}

	// A symbolic link in place of the image directory is refused: the store
	// would otherwise write where the link points.
	if err := os.RemoveAll(filepath.Join(root, "sha256")); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, "sha256")); err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutImage(ctx, png); !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), "symbolic link or not a directory") {
		t.Errorf("PutImage through a linked image directory: %v", err)
	}
	if _, err := store.GetImage(ctx, ref); !errors.Is(err, media.ErrStore) {
		t.Errorf("GetImage through a linked image directory: %v", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("the store wrote through a link: %v", entries)
	}

	// References of other stores are refused without touching the disk.
	other, err := localstore.New(filepath.Join(filepath.Dir(root), "other"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetImage(ctx, ref); !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), "not in this store") {
		t.Errorf("another store's reference: %v", err)
	}
	missing, err := localstore.New(filepath.Join(filepath.Dir(root), "missing"))
	if err != nil {
		t.Fatal(err)
	}
	mref, _ := media.BuildReference(png, missing.StoreURI())
	if _, err := missing.GetImage(ctx, mref); !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a store never written: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "missing")); !os.IsNotExist(err) {
		t.Error("a read made the store's root")
	}

	for _, bad := range []string{"", "relative/media", "/", "/srv/../etc", "/srv/media/", "/" + strings.Repeat("x", 1024)} {
		if _, err := localstore.New(bad); err == nil {
			t.Errorf("New(%q) took it", bad)
		}
	}
}

func TestReadersAndWritersOfOneNewImageAtOnceAllSucceed(t *testing.T) {
	ctx := context.Background()
	store, err := localstore.New(filepath.Join(t.TempDir(), "media"))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 40 {
		png := mediatest.PNG(3, 3, byte(round))
		ref, err := media.BuildReference(png, store.StoreURI())
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Go(func() {
				if i%2 == 0 {
					if _, err := store.PutImage(ctx, png); err != nil {
						errs <- err
					}
					return
				}
				for range 20 {
					data, err := store.GetImage(ctx, ref)
					switch {
					case err != nil && strings.Contains(err.Error(), "does not exist"):
					case err != nil:
						errs <- err
						return
					case !bytes.Equal(data, png):
						errs <- errors.New("a reader got other bytes")
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
	}
}
