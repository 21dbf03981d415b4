package icetable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	icebergio "github.com/apache/iceberg-go/io"

	"strata/tiering/objstore"
)

// fileIO is iceberg-go's file system over strata's object store, so the
// table's metadata goes wherever the cold tier is (S3/MinIO, HDFS, a local
// folder) with its retries and metrics. Iceberg names files by URI; base is
// the URI of the bucket's root, and a file's object name is what follows it.
type fileIO struct {
	ctx    context.Context
	bucket objstore.Bucket
	base   string
	// within, if set, is the folder (an object-name prefix) every file
	// must be in: a table's topic's.
	within string
}

var (
	_ icebergio.ReadFileIO  = fileIO{}
	_ icebergio.WriteFileIO = fileIO{}
)

// objectName is the object a URI under base names.
func (f fileIO) objectName(op, uri string) (string, error) {
	name, ok := strings.CutPrefix(uri, f.base+"/")
	if !ok || objstore.ValidateName(name) != nil {
		return "", &fs.PathError{Op: op, Path: uri, Err: fmt.Errorf("%w: not an object under %s", fs.ErrInvalid, f.base)}
	}
	if !strings.HasPrefix(name, f.within) {
		return "", &fs.PathError{Op: op, Path: uri, Err: fmt.Errorf("%w: not in the table's topic's folder %s", fs.ErrPermission, f.within)}
	}
	return name, nil
}

func pathError(op, uri string, err error) error {
	if errors.Is(err, objstore.ErrNotFound) {
		err = fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return &fs.PathError{Op: op, Path: uri, Err: err}
}

func (f fileIO) Open(uri string) (icebergio.File, error) {
	name, err := f.objectName("open", uri)
	if err != nil {
		return nil, err
	}
	a, err := f.bucket.Stat(f.ctx, name)
	if err != nil {
		return nil, pathError("open", uri, err)
	}
	return &objectFile{io: f, uri: uri, name: name, attrs: a}, nil
}

func (f fileIO) ReadFile(uri string) ([]byte, error) {
	name, err := f.objectName("read", uri)
	if err != nil {
		return nil, err
	}
	b, err := objstore.ReadAll(f.ctx, f.bucket, name)
	if err != nil {
		return nil, pathError("read", uri, err)
	}
	return b, nil
}

func (f fileIO) Remove(uri string) error {
	name, err := f.objectName("remove", uri)
	if err != nil {
		return err
	}
	if err := f.bucket.Delete(f.ctx, name); err != nil {
		return pathError("remove", uri, err)
	}
	return nil
}

func (f fileIO) WriteFile(uri string, p []byte) error {
	name, err := f.objectName("write", uri)
	if err != nil {
		return err
	}
	if err := f.bucket.Upload(f.ctx, name, bytes.NewReader(p)); err != nil {
		return pathError("write", uri, err)
	}
	return nil
}

// Create buffers what is written and uploads it at Close: metadata files
// are small, and an upload is atomic, so a writer that dies midway leaves
// nothing a reader could take for a whole file.
func (f fileIO) Create(uri string) (icebergio.FileWriter, error) {
	name, err := f.objectName("create", uri)
	if err != nil {
		return nil, err
	}
	return &objectWriter{io: f, uri: uri, name: name}, nil
}

type objectWriter struct {
	io     fileIO
	uri    string
	name   string
	buf    bytes.Buffer
	closed bool
}

func (w *objectWriter) Write(p []byte) (int, error)         { return w.buf.Write(p) }
func (w *objectWriter) ReadFrom(r io.Reader) (int64, error) { return w.buf.ReadFrom(r) }

func (w *objectWriter) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.io.bucket.Upload(w.io.ctx, w.name, bytes.NewReader(w.buf.Bytes())); err != nil {
		return pathError("write", w.uri, err)
	}
	return nil
}

// objectFile reads an object with ranged reads.
type objectFile struct {
	io    fileIO
	uri   string
	name  string
	attrs objstore.Attrs
	pos   int64
}

func (o *objectFile) Stat() (fs.FileInfo, error) { return objectInfo{o.attrs}, nil }
func (o *objectFile) Close() error               { return nil }

func (o *objectFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= o.attrs.Size {
		return 0, io.EOF
	}
	n, err := o.io.bucket.ReadAt(o.io.ctx, o.name, p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return n, pathError("read", o.uri, err)
	}
	return n, err
}

func (o *objectFile) Read(p []byte) (int, error) {
	if o.pos >= o.attrs.Size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), o.attrs.Size-o.pos)]
	n, err := o.ReadAt(p, o.pos)
	o.pos += int64(n)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	return n, err
}

func (o *objectFile) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += o.pos
	case io.SeekEnd:
		offset += o.attrs.Size
	default:
		return 0, fmt.Errorf("seek %s: whence %d", o.uri, whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("seek %s: to %d, before the start", o.uri, offset)
	}
	o.pos = offset
	return offset, nil
}

type objectInfo struct{ a objstore.Attrs }

func (i objectInfo) Name() string {
	return i.a.Name[strings.LastIndexByte(i.a.Name, '/')+1:]
}
func (i objectInfo) Size() int64        { return i.a.Size }
func (i objectInfo) Mode() fs.FileMode  { return 0o444 }
func (i objectInfo) ModTime() time.Time { return i.a.ModTime }
func (i objectInfo) IsDir() bool        { return false }
func (i objectInfo) Sys() any           { return nil }

var _ icebergio.ListableIO = fileIO{}

// WalkDir lists the objects under root, for iceberg-go's orphan sweep
// (SweepOrphans). The table's pointer is left out: no metadata names it, so
// the sweep would take it for an orphan once it is older than the grace.
func (f fileIO) WalkDir(root string, fn fs.WalkDirFunc) error {
	name, err := f.objectName("walk", strings.TrimSuffix(root, "/")+"/x")
	if err != nil {
		return err
	}
	dir := strings.TrimSuffix(name, "x")
	var found []objstore.Attrs
	if err := f.bucket.List(f.ctx, dir, func(a objstore.Attrs) error {
		if !strings.HasSuffix(a.Name, "/"+hintName) {
			found = append(found, a)
		}
		return nil
	}); err != nil {
		return fn(root, nil, pathError("walk", root, err))
	}
	for _, a := range found {
		if err := fn(f.base+"/"+a.Name, fs.FileInfoToDirEntry(objectInfo{a}), nil); err != nil {
			if errors.Is(err, fs.SkipDir) || errors.Is(err, fs.SkipAll) {
				return nil
			}
			return err
		}
	}
	return nil
}
