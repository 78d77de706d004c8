package media

import (
	"path"
	"strings"
)

// SystemDirectories are the directories a local directory store's root may
// neither be nor lie under. Worker pods mount the store read-write at its
// root, and without a PersistentVolumeClaim they mount the node's directory
// of that path, so a root here would hand a namespace's users a node's
// binaries, configuration, credentials, kubelet and container runtime state,
// or a world-writable directory whose entries anyone on the node controls.
// Every directory whose name starts with "/lib" is refused as well (/lib32,
// /lib64, /libx32, /libexec, ...). The API server refuses the same list with
// CEL (api/v1alpha1); a test checks that the two agree.
var SystemDirectories = []string{
	"/bin", "/boot", "/dev", "/efi", "/etc", "/home", "/nix", "/opt", "/proc",
	"/root", "/run", "/sbin", "/snap", "/sys", "/tmp", "/usr", "/var",
}

// IsCleanAbsolutePath reports whether p is absolute and already in its
// shortest form: no empty, "." or ".." segments and no trailing slash, so a
// prefix comparison of two such paths is a comparison of directories.
func IsCleanAbsolutePath(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}

// IsSystemPath reports whether p is "/" or a system directory or lies
// under one. p must be a clean absolute path.
func IsSystemPath(p string) bool {
	if p == "/" {
		return true
	}
	first, _, _ := strings.Cut(p[1:], "/")
	if strings.HasPrefix(first, "lib") {
		return true
	}
	for _, d := range SystemDirectories {
		if IsUnder(p, d) {
			return true
		}
	}
	return false
}

// IsUnder reports whether p is dir or lies under it; both must be clean
// absolute paths.
func IsUnder(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
