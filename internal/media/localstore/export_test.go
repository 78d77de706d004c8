package localstore

// WatchSyncs records the path of every file and directory the store syncs,
// read from /proc/self/fd, before syncing it.
func (s *Store) WatchSyncs(record func(path string)) {
	inner := s.sync
	s.sync = func(fd int) error {
		record(fdPath(fd))
		return inner(fd)
	}
}
