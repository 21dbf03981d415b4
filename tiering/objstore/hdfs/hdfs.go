// Package hdfs is the Bucket for HDFS, on colinmarc/hdfs (the native
// protocol, no JVM).
package hdfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	hdfsclient "github.com/colinmarc/hdfs/v2"

	"strata/tiering/objstore"
)

// Config says where the bucket lives.
type Config struct {
	// NameNodes are host:port addresses; more than one for an HA pair.
	NameNodes []string
	// Root is the HDFS folder that holds the objects, e.g. "/strata".
	Root string
	// User to act as; default HADOOP_USER_NAME, else the OS user.
	User string
	// DialTimeout bounds each connection attempt (default 5s), so an
	// unreachable NameNode is an error, never a hang.
	DialTimeout time.Duration
}

// Bucket stores each object as an HDFS file under Root.
type Bucket struct {
	cfg    Config
	client *hdfsclient.Client
	// Open readers, one read at a time each: the client's reader seeks.
	readers *objstore.Handles[*hdfsclient.FileReader]

	// The client fetches the server's defaults lazily on its first Create,
	// without a lock; fetching them once, under ours, keeps concurrent
	// uploads from racing on it.
	defaultsMu sync.Mutex
	defaults   bool
}

func (b *Bucket) fetchDefaults() error {
	b.defaultsMu.Lock()
	defer b.defaultsMu.Unlock()
	if b.defaults {
		return nil
	}
	if _, err := b.client.ServerDefaults(); err != nil {
		return err
	}
	b.defaults = true
	return nil
}

// New connects to the NameNode.
func New(cfg Config) (*Bucket, error) {
	if len(cfg.NameNodes) == 0 {
		return nil, errors.New("hdfs bucket: no namenode address given")
	}
	if cfg.Root == "" || !strings.HasPrefix(cfg.Root, "/") {
		return nil, fmt.Errorf("hdfs bucket: root %q must be an absolute HDFS path", cfg.Root)
	}
	cfg.Root = path.Clean(cfg.Root)
	if cfg.User == "" {
		cfg.User = os.Getenv("HADOOP_USER_NAME")
	}
	if cfg.User == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("hdfs bucket: no user given and none found: %w", err)
		}
		cfg.User = u.Username
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	dial := (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	client, err := hdfsclient.NewClient(hdfsclient.ClientOptions{
		Addresses:        cfg.NameNodes,
		User:             cfg.User,
		NamenodeDialFunc: dial,
		DatanodeDialFunc: dial,
	})
	if err != nil {
		return nil, fmt.Errorf("hdfs bucket at namenode %s: %w", strings.Join(cfg.NameNodes, ","), err)
	}
	b := &Bucket{cfg: cfg, client: client}
	b.readers = objstore.NewHandles(64, true, b.openReader, func(f *hdfsclient.FileReader) { f.Close() })
	return b, nil
}

func (b *Bucket) openReader(name string) (*hdfsclient.FileReader, error) {
	f, err := b.client.Open(b.path(name))
	if err != nil {
		return nil, b.wrap("read", name, err)
	}
	if f.Stat().IsDir() {
		f.Close()
		return nil, objstore.NotFound("hdfs", name)
	}
	return f, nil
}

func (b *Bucket) Kind() string { return "hdfs" }

func (b *Bucket) Close() error {
	b.readers.Close()
	return b.client.Close()
}

func (b *Bucket) path(name string) string { return b.cfg.Root + "/" + name }

func (b *Bucket) where() string { return "namenode " + strings.Join(b.cfg.NameNodes, ",") }

// Upload writes under TempDir and renames into place (HDFS renames are atomic
// and replace the target), so readers never see a partial file.
func (b *Bucket) Upload(ctx context.Context, name string, r io.Reader) (err error) {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	if err := b.fetchDefaults(); err != nil {
		return b.wrap("upload", name, err)
	}
	tmpDir := b.path(objstore.TempDir)
	if err := b.client.MkdirAll(tmpDir, 0o755); err != nil {
		return b.wrap("upload", name, err)
	}
	var rnd [12]byte
	rand.Read(rnd[:])
	tmp := tmpDir + "/upload-" + hex.EncodeToString(rnd[:])
	w, err := b.client.Create(tmp)
	if err != nil {
		return b.wrap("upload", name, err)
	}
	defer func() {
		if err != nil {
			b.client.Remove(tmp)
		}
	}()
	if _, err = io.Copy(w, objstore.ContextReader(ctx, r)); err != nil {
		w.Close()
		return b.wrap("upload", name, err)
	}
	if err = closeWriter(ctx, w); err != nil {
		return b.wrap("upload", name, err)
	}
	dst := b.path(name)
	if err = b.client.MkdirAll(path.Dir(dst), 0o755); err != nil {
		return b.wrap("upload", name, err)
	}
	if err = b.client.Rename(tmp, dst); err != nil {
		return b.wrap("upload", name, err)
	}
	b.readers.Invalidate(name)
	return nil
}

// closeWriter retries Close while the NameNode reports the last block still
// replicating, as Hadoop's own client does.
func closeWriter(ctx context.Context, w *hdfsclient.FileWriter) error {
	delay := 50 * time.Millisecond
	for {
		err := w.Close()
		if !hdfsclient.IsErrReplicating(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// ReadAt borrows an open reader (or opens one) for this read alone.
func (b *Bucket) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	if err := objstore.CheckReadAt(name, off); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := b.readers.ReadAt(name, func(f *hdfsclient.FileReader) (int, error) {
		if dl, ok := ctx.Deadline(); ok {
			f.SetDeadline(dl)
		} else {
			f.SetDeadline(time.Time{})
		}
		if off >= f.Stat().Size() { // the client refuses to seek past the end
			return 0, io.EOF
		}
		return f.ReadAt(p, off)
	})
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, objstore.ErrNotFound) {
		return n, b.wrap("read", name, err)
	}
	return n, err
}

func (b *Bucket) Stat(ctx context.Context, name string) (objstore.Attrs, error) {
	if err := objstore.ValidateName(name); err != nil {
		return objstore.Attrs{}, err
	}
	fi, err := b.client.Stat(b.path(name))
	if err != nil {
		return objstore.Attrs{}, b.wrap("stat", name, err)
	}
	if fi.IsDir() {
		return objstore.Attrs{}, objstore.NotFound("hdfs", name)
	}
	return objstore.Attrs{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (b *Bucket) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return err
	}
	dir := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir = prefix[:i]
	}
	var found []objstore.Attrs
	var walk func(rel string) error
	walk = func(rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		full := b.cfg.Root
		if rel != "" {
			full += "/" + rel
		}
		entries, err := b.client.ReadDir(full)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, e := range entries {
			name := e.Name()
			if rel != "" {
				name = rel + "/" + name
			}
			if e.IsDir() {
				if name == objstore.TempDir {
					continue
				}
				// Only descend where names can still match the prefix.
				if strings.HasPrefix(name+"/", prefix) || strings.HasPrefix(prefix, name+"/") {
					if err := walk(name); err != nil {
						return err
					}
				}
				continue
			}
			if strings.HasPrefix(name, prefix) {
				found = append(found, objstore.Attrs{Name: name, Size: e.Size(), ModTime: e.ModTime()})
			}
		}
		return nil
	}
	if err := walk(dir); err != nil {
		return fmt.Errorf("hdfs list %q at %s: %w", prefix, b.where(), err)
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
	err := b.client.Remove(b.path(name))
	b.readers.Invalidate(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return b.wrap("delete", name, err)
	}
	return nil
}

// Check proves the NameNode answers and the root folder can be created.
func (b *Bucket) Check(ctx context.Context) error {
	if err := b.client.MkdirAll(b.path(objstore.TempDir), 0o755); err != nil {
		return fmt.Errorf("hdfs bucket %s at %s: %w", b.cfg.Root, b.where(), err)
	}
	return nil
}

// SweepTemp deletes staged uploads older than olderThan: what a process
// that died mid-upload left in TempDir. Returns how many it deleted.
// AbortIncomplete has nothing to do: an unfinished upload here is a staged
// file, which SweepTemp removes.
func (b *Bucket) AbortIncomplete(context.Context, string, time.Duration) (int, error) { return 0, nil }

func (b *Bucket) SweepTemp(ctx context.Context, olderThan time.Duration) (int, error) {
	entries, err := b.client.ReadDir(b.path(objstore.TempDir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("hdfs sweep at %s: %w", b.where(), err)
	}
	n := 0
	for _, e := range entries {
		if time.Since(e.ModTime()) > olderThan && b.client.Remove(b.path(objstore.TempDir)+"/"+e.Name()) == nil {
			n++
		}
	}
	return n, nil
}

func (b *Bucket) wrap(op, name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return objstore.NotFound("hdfs", name)
	}
	return fmt.Errorf("hdfs %s %q at %s: %w", op, name, b.where(), err)
}
