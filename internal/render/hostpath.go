package render

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/media"
)

// ParseHostPathRoots reads the operator's allow-list of host directories
// that localDirectory MediaStores without a PersistentVolumeClaim may mount
// (hostPath), comma-separated. Each entry gives directories to namespaces:
// ROOT gives each namespace ROOT/<namespace> and everything under it, and
// NAMESPACE:ROOT gives that namespace ROOT and everything under it. A ROOT
// is a clean absolute path, not a system directory or under one. Empty
// means no hostPath at all.
func ParseHostPathRoots(list string) ([]string, error) {
	var roots []string
	for _, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		namespace, root := splitHostPathRoot(entry)
		if namespace != "" {
			if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
				return nil, fmt.Errorf("host path root %q: namespace %q: %s", entry, namespace, strings.Join(errs, "; "))
			}
		}
		switch {
		case !media.IsCleanAbsolutePath(root):
			return nil, fmt.Errorf("host path root %q must be a clean absolute path, without empty, '.' or '..' segments or a trailing slash", root)
		case media.IsSystemPath(root):
			return nil, fmt.Errorf("host path root %q is a system directory or lies under one (%s, /lib*), which no MediaStore may use",
				root, strings.Join(media.SystemDirectories, ", "))
		}
		if !slices.Contains(roots, entry) {
			roots = append(roots, entry)
		}
	}
	return roots, nil
}

// splitHostPathRoot reads one entry of the allow-list: NAMESPACE:ROOT, or
// ROOT alone, which starts with a slash.
func splitHostPathRoot(entry string) (namespace, root string) {
	if strings.HasPrefix(entry, "/") {
		return "", entry
	}
	namespace, root, _ = strings.Cut(entry, ":")
	return namespace, root
}

// HostPathBase returns the allowed directory that a store of namespace at
// root lies under: the directory below which no component may be a
// symbolic link, which the worker pod checks when it starts. ok is false
// when the namespace may not mount root: it is not a clean absolute path,
// a system directory, or under a directory allowed to the namespace.
func HostPathBase(root, namespace string, allowedRoots []string) (base string, ok bool) {
	if !media.IsCleanAbsolutePath(root) || media.IsSystemPath(root) || namespace == "" {
		return "", false
	}
	for _, entry := range allowedRoots {
		owner, dir := splitHostPathRoot(entry)
		if owner == "" {
			dir = path.Join(dir, namespace)
		} else if owner != namespace {
			continue
		}
		if media.IsCleanAbsolutePath(dir) && !media.IsSystemPath(dir) && media.IsUnder(root, dir) {
			return dir, true
		}
	}
	return "", false
}

// HostPathAllowed reports whether a worker pod of namespace may mount the
// node's directory root.
func HostPathAllowed(root, namespace string, allowedRoots []string) bool {
	_, ok := HostPathBase(root, namespace, allowedRoots)
	return ok
}

// CheckMediaStore applies the operator's rules the API server cannot know:
// a localDirectory store without a PersistentVolumeClaim is a hostPath
// volume, allowed only under the operator's host path roots.
func CheckMediaStore(ms *agentsv1.MediaStore, hostPathRoots []string) *Blocker {
	local := ms.Spec.LocalDirectory
	if local == nil || local.PersistentVolumeClaimName != "" || HostPathAllowed(local.Root, ms.Namespace, hostPathRoots) {
		return nil
	}
	allowed := "the operator allows namespace " + ms.Namespace + " none"
	if dirs := allowedTo(ms.Namespace, hostPathRoots); len(dirs) > 0 {
		allowed = "the operator allows namespace " + ms.Namespace + " " + strings.Join(dirs, ", ")
	}
	return blocked(agentsv1.ReasonHostPathNotAllowed,
		"spec.localDirectory.root: %s would be mounted from the node (hostPath) because spec.localDirectory.persistentVolumeClaimName is not set, "+
			"and it is not a host directory the operator allows (%s); use a PersistentVolumeClaim, "+
			"or ask the operator's administrator to allow this directory with --media-host-path-roots",
		local.Root, allowed)
}

// allowedTo lists the directories a namespace may mount, for messages: it
// names no other namespace's.
func allowedTo(namespace string, allowedRoots []string) []string {
	var out []string
	for _, entry := range allowedRoots {
		switch owner, dir := splitHostPathRoot(entry); owner {
		case "":
			out = append(out, path.Join(dir, namespace))
		case namespace:
			out = append(out, dir)
		}
	}
	return out
}
