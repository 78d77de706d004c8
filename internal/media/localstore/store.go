// Package localstore keeps session images in a directory, for a client and
// workers that share one POSIX file system: <root>/sha256/<sha256>.
//
// Every path under the root is opened relative to an open directory and
// without following symbolic links, so a link planted under the root
// cannot send a write or a read elsewhere. Symbolic links in the root's own
// path are followed, since whoever chose the root chose them.
package localstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/stepwise-run/stepwise/internal/media"
)

const (
	dirMode  = 0o700
	fileMode = 0o600
	// imageDir is the directory under the root that holds the images.
	imageDir = "sha256"
)

// Store is a local directory media store.
type Store struct {
	root     string
	storeURI string
	// sync makes a file or directory durable; tests watch it.
	sync func(fd int) error
}

var _ media.Store = (*Store)(nil)

// New builds a store for an absolute, clean root. The directory need not
// exist: the first PutImage creates it.
func New(root string) (*Store, error) {
	if !media.IsCleanAbsolutePath(root) || root == "/" {
		return nil, fmt.Errorf("local media store: root %q must be a clean absolute path other than /", root)
	}
	storeURI := media.LocalStoreURI(root)
	if err := media.CheckStoreURI(storeURI); err != nil {
		return nil, fmt.Errorf("local media store: %w", err)
	}
	return &Store{root: root, storeURI: storeURI, sync: unix.Fsync}, nil
}

// StoreURI is file://<percent-encoded root>.
func (s *Store) StoreURI() string { return s.storeURI }

// String names the store.
func (s *Store) String() string { return "local media store " + s.storeURI }

// PutImage writes an image into a temporary file beside its place, syncs
// it and renames it into place; an image file that already holds the
// bytes is success, and one that holds other bytes is replaced. Before it
// returns, written or not, it syncs the sha256 directory, the root and the
// root's parent, so the image survives a crash of the machine once the
// reference is out; it also syncs the parent of every directory it makes.
func (s *Store) PutImage(_ context.Context, data []byte) (media.Reference, error) {
	ref, err := media.BuildReference(data, s.storeURI)
	if err != nil {
		return media.Reference{}, err
	}
	fail := func(err error) (media.Reference, error) {
		return media.Reference{}, &media.StoreError{Op: "write", URI: ref.URI, Err: err}
	}
	parent, err := s.openParent()
	if err != nil {
		return fail(err)
	}
	defer closeFD(parent)
	root, err := s.ensureDir(parent, path.Base(s.root))
	if err != nil {
		return fail(err)
	}
	defer closeFD(root)
	images, err := s.ensureDir(root, imageDir)
	if err != nil {
		return fail(err)
	}
	defer closeFD(images)

	same, err := holds(images, ref, data)
	if err != nil {
		return fail(err)
	}
	if !same {
		if err := s.writeAndRename(images, ref.SHA256, data); err != nil {
			return fail(err)
		}
	}
	for _, dir := range []struct {
		fd   int
		name string
	}{{images, imageDir + " directory"}, {root, "root"}, {parent, "root's parent"}} {
		if err := s.sync(dir.fd); err != nil {
			return fail(fmt.Errorf("syncing the %s: %w", dir.name, err))
		}
	}
	return ref, nil
}

// openParent opens the root's parent, making it and any missing ancestor
// with mode 0700 and syncing each one's parent after it is made.
// Directories above the first one that exists must already be durable.
func (s *Store) openParent() (int, error) {
	dir := path.Dir(s.root)
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		return fd, nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return -1, fmt.Errorf("opening %s: %w", dir, err)
	}
	// Walk up to the deepest directory that exists, then make the rest
	// one by one, each relative to the one above it.
	var missing []string
	for errors.Is(err, unix.ENOENT) && dir != "/" {
		missing = append(missing, path.Base(dir))
		dir = path.Dir(dir)
		fd, err = unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", dir, err)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		next, err := s.ensureDir(fd, missing[i])
		closeFD(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// ensureDir opens the directory name in dir, making it with mode 0700 when
// it is missing and then syncing dir. A symbolic link or anything but a
// directory there is refused.
func (s *Store) ensureDir(dir int, name string) (int, error) {
	fd, err := openDir(dir, name)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	if err := unix.Mkdirat(dir, name, dirMode); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("making directory %s: %w", name, err)
	}
	if err := s.sync(dir); err != nil {
		return -1, fmt.Errorf("syncing the parent of %s: %w", name, err)
	}
	return openDir(dir, name)
}

func openDir(dir int, name string) (int, error) {
	fd, err := unix.Openat(dir, name, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("%s is a symbolic link or not a directory", name)
	case err != nil:
		return -1, fmt.Errorf("opening directory %s: %w", name, err)
	}
	return fd, nil
}

// holds reports whether the image file exists with exactly these bytes.
// A missing file, or a regular one with other bytes, is false.
func holds(images int, ref media.Reference, data []byte) (bool, error) {
	got, err := readImage(images, ref)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case errors.Is(err, errNotSame), errors.Is(err, errChanged):
		// Written again: the rename replaces the file whole, and every
		// writer of one reference writes the same bytes.
		return false, nil
	case err != nil:
		return false, err
	}
	return string(got) == string(data), nil
}

// errNotSame is a regular, singly linked image file whose size is not
// the reference's.
var errNotSame = errors.New("the image file has another size")

// maxReads bounds the reads of an image file that writers of the same
// image keep replacing.
const maxReads = 32

// errChanged is an image file replaced between its status and its
// opening, or after it, as when another writer of the same image renames
// its copy into place.
var errChanged = errors.New("the image file changed while it was opened")

// readImage refuses anything but a regular file with one link before it
// opens the image file, so a device is never opened; it opens without
// following a link and without blocking on a FIFO, checks that it opened
// the file it looked at and its size, and reads at most one byte past it.
func readImage(images int, ref media.Reference) ([]byte, error) {
	var before unix.Stat_t
	err := unix.Fstatat(images, ref.SHA256, &before, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil, os.ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("reading the image file's status: %w", err)
	}
	if before.Nlink == 0 {
		// Replaced by a rename while its status was read.
		return nil, errChanged
	}
	if err := checkImageFile(&before); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(images, ref.SHA256, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, os.ErrNotExist
	case errors.Is(err, unix.ELOOP):
		return nil, errors.New("the image file is a symbolic link")
	case err != nil:
		return nil, fmt.Errorf("opening the image file: %w", err)
	}
	f := os.NewFile(uintptr(fd), ref.SHA256)
	defer func() { _ = f.Close() }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("reading the image file's status: %w", err)
	}
	if st.Nlink == 0 {
		// Replaced by a rename after it was opened.
		return nil, errChanged
	}
	if err := checkImageFile(&st); err != nil {
		return nil, err
	}
	if st.Dev != before.Dev || st.Ino != before.Ino {
		return nil, errChanged
	}
	if st.Size != ref.SizeBytes {
		return nil, fmt.Errorf("%w: %d bytes, the reference has %d", errNotSame, st.Size, ref.SizeBytes)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, ref.SizeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the image file: %w", err)
	}
	return data, nil
}

func checkImageFile(st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return errors.New("the image file is a symbolic link")
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errors.New("the image file is not a regular file")
	case st.Nlink != 1:
		return fmt.Errorf("the image file has %d hard links, not 1", st.Nlink)
	}
	return nil
}

// writeAndRename writes the bytes into a new temporary file in the image
// directory, syncs it, and renames it over the image's name.
func (s *Store) writeAndRename(images int, sum string, data []byte) error {
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return err
	}
	tmp := ".tmp-" + sum[:16] + "-" + hex.EncodeToString(suffix[:])
	fd, err := unix.Openat(images, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
	if err != nil {
		return fmt.Errorf("creating a temporary file: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	done := false
	defer func() {
		_ = f.Close()
		if !done {
			_ = unix.Unlinkat(images, tmp, 0)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing the temporary file: %w", err)
	}
	if err := s.sync(fd); err != nil {
		return fmt.Errorf("syncing the temporary file: %w", err)
	}
	if err := unix.Renameat(images, tmp, images, sum); err != nil {
		return fmt.Errorf("renaming the temporary file into place: %w", err)
	}
	done = true
	return nil
}

// GetImage reads an image of this store: the reference must be under the
// store's root, the file a regular file with one link and the reference's
// size, and VerifyBytes checks its bytes.
func (s *Store) GetImage(_ context.Context, ref media.Reference) ([]byte, error) {
	if err := media.RequireStoreReference(ref, s.storeURI); err != nil {
		return nil, err
	}
	fail := func(err error) ([]byte, error) {
		return nil, &media.StoreError{Op: "read", URI: ref.URI, Err: err}
	}
	root, err := unix.Open(s.root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return fail(errors.New("the image does not exist"))
	}
	if err != nil {
		return fail(fmt.Errorf("opening the root: %w", err))
	}
	defer closeFD(root)
	images, err := openDir(root, imageDir)
	if errors.Is(err, unix.ENOENT) {
		return fail(errors.New("the image does not exist"))
	}
	if err != nil {
		return fail(err)
	}
	defer closeFD(images)
	data, err := readImage(images, ref)
	for tries := 1; errors.Is(err, errChanged) && tries < maxReads; tries++ {
		// Another writer of the same image renamed its copy into place
		// while this read looked: the rename is whole, so read again. Each
		// writer renames once, so the reads settle.
		data, err = readImage(images, ref)
	}
	if errors.Is(err, os.ErrNotExist) {
		return fail(errors.New("the image does not exist"))
	}
	if err != nil {
		return fail(err)
	}
	if err := media.VerifyBytes(ref, data); err != nil {
		return nil, err
	}
	return data, nil
}

func closeFD(fd int) { _ = unix.Close(fd) }
