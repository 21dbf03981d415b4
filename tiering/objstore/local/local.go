// Package local is the Bucket for a folder on local disk: the embedded
// default cold tier, and the one an analyst can point DuckDB at directly.
package local

import (
	"context"
	"crypto/rand"
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
	files *objstore.Handles[*os.File]
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
	b.files = objstore.NewHandles(256, false, b.openFile, func(f *os.File) { f.Close() })
	return b, nil
}

func (b *Bucket) openFile(name string) (*os.File, error) {
	f, err := os.Open(b.path(name))
	if err != nil {
		return nil, b.wrap(name, err)
	}
	if fi, err := f.Stat(); err != nil || fi.IsDir() {
		f.Close()
		if err != nil {
			return nil, b.wrap(name, err)
		}
		return nil, objstore.NotFound("local", name)
	}
	return f, nil
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
func (b *Bucket) Upload(ctx context.Context, name string, r io.Reader) (err error) {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Join(b.root, objstore.TempDir), "upload-*")
	if err != nil {
		return fmt.Errorf("local upload %q: %w", name, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, objstore.ContextReader(ctx, r)); err != nil {
		return fmt.Errorf("local upload %q: %w", name, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("local upload %q: fsync: %w", name, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("local upload %q: %w", name, err)
	}
	dst := b.path(name)
	if err = os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("local upload %q: %w", name, err)
	}
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("local upload %q: %w", name, err)
	}
	b.files.Invalidate(name)
	if err = syncDir(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("local upload %q: fsync folder: %w", name, err)
	}
	return nil
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
	n, err := b.files.ReadAt(name, func(f *os.File) (int, error) { return f.ReadAt(p, off) })
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
	err := os.Remove(b.path(name))
	b.files.Invalidate(name)
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
