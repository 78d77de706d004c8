package media

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CheckRoot checks, inside a worker pod, the hostPath store the kubelet
// mounted: base is the allowed directory as the pod sees it, rel the
// store's root below it, and store the store as mounted. No component of
// rel may be a symbolic link, each must be a directory, and the directory
// rel names must be the one mounted, so a link swapped for a directory
// after the mount is caught too.
func CheckRoot(base, rel, store string) error {
	info, err := os.Lstat(base)
	if err != nil {
		return fmt.Errorf("the allowed directory: %w", err)
	}
	current, shown := base, ""
	if rel != "" {
		for _, part := range strings.Split(rel, "/") {
			if part == "" || part == "." || part == ".." {
				return fmt.Errorf("the store's root %q is not a clean path below the allowed directory", rel)
			}
			current = filepath.Join(current, part)
			shown = filepath.Join(shown, part)
			if info, err = os.Lstat(current); err != nil {
				return fmt.Errorf("component %q of the store's root: %w", shown, err)
			}
			if info.Mode()&os.ModeSymlink != 0 {
				return fmt.Errorf("component %q of the store's root is a symbolic link; a MediaStore's root may not pass through one", shown)
			}
			if !info.IsDir() {
				return fmt.Errorf("component %q of the store's root is not a directory", shown)
			}
		}
	}
	mounted, err := os.Stat(store)
	if err != nil {
		return fmt.Errorf("the mounted store: %w", err)
	}
	if !os.SameFile(info, mounted) {
		return errors.New("the directory mounted as the store is not the one its root names: a component was replaced after the mount")
	}
	return nil
}
