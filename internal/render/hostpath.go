package render

import (
	"fmt"
	"slices"
	"strings"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/media"
)

// ParseHostPathRoots reads the operator's allow-list of host directories
// that localDirectory MediaStores without a PersistentVolumeClaim may mount
// (hostPath): comma-separated clean absolute paths, none a system
// directory or under one. Empty means no hostPath at all.
func ParseHostPathRoots(list string) ([]string, error) {
	var roots []string
	for _, root := range strings.Split(list, ",") {
		root = strings.TrimSpace(root)
		switch {
		case root == "":
			continue
		case !media.IsCleanAbsolutePath(root):
			return nil, fmt.Errorf("host path root %q must be a clean absolute path, without empty, '.' or '..' segments or a trailing slash", root)
		case media.IsSystemPath(root):
			return nil, fmt.Errorf("host path root %q is a system directory or lies under one (%s, /lib*), which no MediaStore may use",
				root, strings.Join(media.SystemDirectories, ", "))
		}
		if !slices.Contains(roots, root) {
			roots = append(roots, root)
		}
	}
	return roots, nil
}

// HostPathAllowed reports whether a worker pod may mount the node's
// directory root: it is a clean absolute path, not a system directory, and
// one of the allowed roots or under one.
func HostPathAllowed(root string, allowedRoots []string) bool {
	if !media.IsCleanAbsolutePath(root) || media.IsSystemPath(root) {
		return false
	}
	return slices.ContainsFunc(allowedRoots, func(allowed string) bool {
		return media.IsCleanAbsolutePath(allowed) && !media.IsSystemPath(allowed) && media.IsUnder(root, allowed)
	})
}

// CheckMediaStore applies the operator's rules the API server cannot know:
// a localDirectory store without a PersistentVolumeClaim is a hostPath
// volume, allowed only under the operator's host path roots.
func CheckMediaStore(ms *agentsv1.MediaStore, hostPathRoots []string) *Blocker {
	local := ms.Spec.LocalDirectory
	if local == nil || local.PersistentVolumeClaimName != "" || HostPathAllowed(local.Root, hostPathRoots) {
		return nil
	}
	allowed := "the operator allows none"
	if len(hostPathRoots) > 0 {
		allowed = "the operator allows " + strings.Join(hostPathRoots, ", ")
	}
	return blocked(agentsv1.ReasonHostPathNotAllowed,
		"spec.localDirectory.root: %s would be mounted from the node (hostPath) because spec.localDirectory.persistentVolumeClaimName is not set, "+
			"and it is not a host directory the operator allows (%s); use a PersistentVolumeClaim, "+
			"or ask the operator's administrator to allow this directory with --media-host-path-roots",
		local.Root, allowed)
}
