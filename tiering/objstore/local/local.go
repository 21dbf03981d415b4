// Package local is the Bucket for a folder on local disk: the embedded
// default cold tier, and the one an analyst can point DuckDB at directly.
package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"strata/tiering/objstore"
)

// Bucket stores each object as a file under its root folder.
type Bucket struct {
	root  string
	files *objstore.Handles[openFile]
}

// openFile is a cached read handle and the file it was opened on, for a
// read to check that the name still points at it (Handles.ReadCurrent).
type openFile struct {
	f  *os.File
	fi os.FileInfo
}

// New opens (creating if needed) a bucket rooted at dir.
func New(dir string) (*Bucket, error) {
	if dir == "" {
		return nil, errors.New("local bucket: no folder given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local bucket %q: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, objstore.TempDir), 0o755); err != nil {
		return nil, fmt.Errorf("local bucket %q: %w", abs, err)
	}
	b := &Bucket{root: abs}
	b.files = objstore.NewHandles(256, false, b.openFile, func(h openFile) { h.f.Close() })
	return b, nil
}

func (b *Bucket) openFile(name string) (openFile, error) {
	f, err := os.Open(b.path(name))
	if err != nil {
		return openFile{}, b.wrap(name, err)
	}
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		f.Close()
		if err != nil {
			return openFile{}, b.wrap(name, err)
		}
		return openFile{}, objstore.NotFound("local", name)
	}
	return openFile{f: f, fi: fi}, nil
}

func (b *Bucket) Kind() string { return "local" }

// Root is the bucket's folder.
func (b *Bucket) Root() string { return b.root }

func (b *Bucket) Close() error {
	b.files.Close()
	return nil
}

func (b *Bucket) path(name string) string {
	return filepath.Join(b.root, filepath.FromSlash(name))
}

// Upload writes a temporary file, fsyncs it, renames it into place and
// fsyncs the folder, so a crash leaves either the old object or the new one.
func (b *Bucket) Upload(ctx context.Context, name string, r io.Reader) error {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	tmp, err := b.stage(ctx, name, r)
	if err != nil {
		return err
	}
	return b.publish(name, tmp, nil)
}

// stage writes what r yields to a new file under TempDir, fsynced and
// closed, and returns its path; on failure it leaves nothing.
func (b *Bucket) stage(ctx context.Context, name string, r io.Reader) (path string, err error) {
	tmp, err := os.CreateTemp(filepath.Join(b.root, objstore.TempDir), "upload-*")
	if err != nil {
		return "", fmt.Errorf("local upload %q: %w", name, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, objstore.ContextReader(ctx, r)); err != nil {
		return "", fmt.Errorf("local upload %q: %w", name, err)
	}
	if err = tmp.Sync(); err != nil {
		return "", fmt.Errorf("local upload %q: fsync: %w", name, err)
	}
	if err = tmp.Close(); err != nil {
		return "", fmt.Errorf("local upload %q: %w", name, err)
	}
	return tmp.Name(), nil
}

// publish renames a staged file into place under the bucket's write lock,
// once check (if given) approves of the object there now; the staged file
// is gone either way.
func (b *Bucket) publish(name, tmp string, check func() error) (err error) {
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	dst := b.path(name)
	if err = os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("local upload %q: %w", name, err)
	}
	unlock, err := b.lock()
	if err != nil {
		return fmt.Errorf("local upload %q: %w", name, err)
	}
	if check != nil {
		if err = check(); err != nil {
			unlock()
			return err
		}
	}
	err = os.Rename(tmp, dst)
	b.files.Invalidate(name)
	unlock()
	if err != nil {
		return fmt.Errorf("local upload %q: %w", name, err)
	}
	if err = syncDir(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("local upload %q: fsync folder: %w", name, err)
	}
	return nil
}

// lockFile, in TempDir, is the bucket's write lock: every rename into
// place and every delete holds it (an flock, so it also excludes other
// processes on this machine sharing the folder, and a dead holder's lock
// goes with its process). It is held only for a compare and a rename, never
// for a copy.
const lockFile = "write.lock"

func (b *Bucket) lock() (unlock func(), err error) {
	// A new open file each time: flock excludes open files, not processes,
	// so goroutines sharing one descriptor would not exclude each other.
	f, err := os.OpenFile(filepath.Join(b.root, objstore.TempDir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// version is a local object's Version: the SHA-256 of its content. A
// content hash, not the file's identity: an inode number comes back for
// other bytes once freed, and mtimes are coarser than back-to-back writes.
func version(data []byte) objstore.Version {
	sum := sha256.Sum256(data)
	return objstore.Version("sha256:" + hex.EncodeToString(sum[:]))
}

// ReadVersioned reads the file through one open descriptor (one inode:
// the bytes of one version, whatever is renamed over it meanwhile).
func (b *Bucket) ReadVersioned(ctx context.Context, name string) ([]byte, objstore.Version, error) {
	if err := objstore.ValidateName(name); err != nil {
		return nil, "", err
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	data, err := b.readSmall(name)
	if err != nil {
		return nil, "", err
	}
	return data, version(data), nil
}

func (b *Bucket) readSmall(name string) ([]byte, error) {
	h, err := b.openFile(name)
	if err != nil {
		return nil, err
	}
	defer h.f.Close()
	data, err := io.ReadAll(io.LimitReader(h.f, objstore.MaxConditionalSize+1))
	if err != nil {
		return nil, fmt.Errorf("local read %q: %w", name, err)
	}
	if len(data) > objstore.MaxConditionalSize {
		return nil, fmt.Errorf("local read %q: more than a versioned read takes (%d bytes)", name, objstore.MaxConditionalSize)
	}
	return data, nil
}

// UploadIf stages the new content, then, under the bucket's write lock,
// hashes the object there now and renames only if it is still the version
// read (or still absent).
func (b *Bucket) UploadIf(ctx context.Context, name string, r io.Reader, match objstore.Version) error {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	data, err := objstore.ReadSmall(ctx, "local", name, r)
	if err != nil {
		return err
	}
	tmp, err := b.stage(ctx, name, bytes.NewReader(data))
	if err != nil {
		return err
	}
	return b.publish(name, tmp, func() error {
		cur, err := b.readSmall(name)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			if match == objstore.Absent {
				return nil
			}
		case err != nil:
			return err
		case match != objstore.Absent && version(cur) == match:
			return nil
		}
		return objstore.PreconditionFailed("local", name, match)
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (b *Bucket) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	if err := objstore.CheckReadAt(name, off); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// A stat per read, cheaper than the open the cached handle saves.
	n, err := b.files.ReadCurrent(name, func(h openFile) (bool, error) {
		now, err := os.Stat(b.path(name))
		if err != nil {
			return false, b.wrap(name, err)
		}
		return os.SameFile(h.fi, now), nil
	}, func(h openFile) (int, error) { return h.f.ReadAt(p, off) })
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, objstore.ErrNotFound) {
		return n, fmt.Errorf("local read %q: %w", name, err)
	}
	return n, err
}

func (b *Bucket) Stat(ctx context.Context, name string) (objstore.Attrs, error) {
	if err := objstore.ValidateName(name); err != nil {
		return objstore.Attrs{}, err
	}
	fi, err := os.Stat(b.path(name))
	if err != nil {
		return objstore.Attrs{}, b.wrap(name, err)
	}
	if fi.IsDir() {
		return objstore.Attrs{}, objstore.NotFound("local", name)
	}
	return objstore.Attrs{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// List walks only the folder the prefix points into, then sorts: a walk
// orders "a/x" before "a-b", byte order does not.
func (b *Bucket) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return err
	}
	start := b.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = b.path(prefix[:i])
	}
	var found []objstore.Attrs
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(b.root, p)
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			if name == objstore.TempDir {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(name, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // deleted while listing
				return nil
			}
			return err
		}
		found = append(found, objstore.Attrs{Name: name, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("local list %q: %w", prefix, err)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	for _, a := range found {
		if err := fn(a); err != nil {
			return err
		}
	}
	return nil
}

func (b *Bucket) Delete(ctx context.Context, name string) error {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	unlock, err := b.lock()
	if err != nil {
		return fmt.Errorf("local delete %q: %w", name, err)
	}
	err = os.Remove(b.path(name))
	b.files.Invalidate(name)
	unlock()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local delete %q: %w", name, err)
	}
	return nil
}

// Check proves the folder is writable by staging and removing a file.
func (b *Bucket) Check(ctx context.Context) error {
	var buf [8]byte
	rand.Read(buf[:])
	p := filepath.Join(b.root, objstore.TempDir, "check-"+hex.EncodeToString(buf[:]))
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return fmt.Errorf("local bucket %q is not writable: %w", b.root, err)
	}
	return os.Remove(p)
}

// SweepTemp deletes staged uploads older than olderThan: what a process
// that died mid-upload left in TempDir. Returns how many it deleted.
// AbortIncomplete has nothing to do: an unfinished upload here is a staged
// file, which SweepTemp removes.
func (b *Bucket) AbortIncomplete(context.Context, string, time.Duration) (int, error) { return 0, nil }

func (b *Bucket) SweepTemp(ctx context.Context, olderThan time.Duration) (int, error) {
	dir := filepath.Join(b.root, objstore.TempDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if e.Name() == lockFile {
			continue // removing it under a holder would let a second one in
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > olderThan {
			if os.Remove(filepath.Join(dir, e.Name())) == nil {
				n++
			}
		}
	}
	return n, nil
}

func (b *Bucket) wrap(name string, err error) error {
	// ENOTDIR: "a/b" when "a" is an object is simply absent.
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return objstore.NotFound("local", name)
	}
	return fmt.Errorf("local %q: %w", name, err)
}
