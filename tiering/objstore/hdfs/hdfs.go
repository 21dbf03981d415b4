// Package hdfs is the Bucket for HDFS, on colinmarc/hdfs (the native
// protocol, no JVM).
package hdfs

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
	"net"
	"os"
	"os/user"
	"path"
	"sort"
	"strconv"
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

// fileID is the NameNode's id of the file fi describes: a file written
// again under the same name has another.
func fileID(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*hdfsclient.FileStatus); ok {
		return st.GetFileId()
	}
	return 0
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
	tmp, err := b.stage(ctx, name, r)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			b.client.Remove(tmp)
		}
	}()
	return b.rename(name, tmp)
}

// stage writes what r yields to a new file under TempDir, closed, and
// returns its path; on failure it leaves nothing.
func (b *Bucket) stage(ctx context.Context, name string, r io.Reader) (tmp string, err error) {
	if err := b.fetchDefaults(); err != nil {
		return "", b.wrap("upload", name, err)
	}
	tmpDir := b.path(objstore.TempDir)
	if err := b.client.MkdirAll(tmpDir, 0o755); err != nil {
		return "", b.wrap("upload", name, err)
	}
	var rnd [12]byte
	rand.Read(rnd[:])
	tmp = tmpDir + "/upload-" + hex.EncodeToString(rnd[:])
	w, err := b.client.Create(tmp)
	if err != nil {
		return "", b.wrap("upload", name, err)
	}
	defer func() {
		if err != nil {
			b.client.Remove(tmp)
		}
	}()
	if _, err = io.Copy(w, objstore.ContextReader(ctx, r)); err != nil {
		w.Close()
		return "", b.wrap("upload", name, err)
	}
	if err = closeWriter(ctx, w); err != nil {
		return "", b.wrap("upload", name, err)
	}
	return tmp, nil
}

// rename moves a staged file into place, replacing what is there.
func (b *Bucket) rename(name, tmp string) error {
	dst := b.path(name)
	if err := b.client.MkdirAll(path.Dir(dst), 0o755); err != nil {
		return b.wrap("upload", name, err)
	}
	err := b.client.Rename(tmp, dst)
	b.readers.Invalidate(name)
	if err != nil {
		return b.wrap("upload", name, err)
	}
	return nil
}

// The conditional write on HDFS.
//
// A version is the file's inode id (HdfsFileStatus.fileId): the NameNode
// gives every file a new one from a counter and never reuses it, and an
// upload renames a new staged file into place, so the id names exactly one
// content. The NameNode has no "rename if the target is still inode X", and
// colinmarc/hdfs's Rename always overwrites, so the compare and the rename
// are made one step by a lock the NameNode itself arbitrates: the write
// lease on a small lock file (TempDir/locks/s{xx}: one of 256 stripes, by
// the name's hash, so that names written once each, such as a Hadoop-style
// table's v{N}.metadata.json, do not leave a lock file apiece behind; two
// names on one stripe wait for each other for a stat and a rename). Appending to a file takes its lease; while one client holds it,
// every other Append (also from the same client) fails with
// AlreadyBeingCreatedException, and closing the file gives it back. A holder
// that dies stops renewing the lease, and the NameNode lets the next Append
// recover it after its soft limit (60 s): a dead writer holds the others up
// that long, never for good. A live writer holds the lock only for a stat
// and a rename. What a lease cannot rule out, no lock can: a writer frozen
// (GC, SIGSTOP) past the soft limit between its compare and its rename.

// lockDir, under TempDir, holds the lock files; SweepTemp leaves it alone.
const lockDir = "locks"

// lockWait bounds the wait for a name's lock: past a dead holder's lease
// soft limit (60 s) with room for its recovery.
const lockWait = 2 * time.Minute

// ReadVersioned stats the file, reads it, and stats it again: the same inode
// id before and after means the bytes are that version's (ids never recur).
func (b *Bucket) ReadVersioned(ctx context.Context, name string) ([]byte, objstore.Version, error) {
	if err := objstore.ValidateName(name); err != nil {
		return nil, "", err
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		before, err := b.version(name)
		if err != nil {
			return nil, "", err
		}
		data, err := b.readSmall(name)
		if err != nil {
			return nil, "", err
		}
		after, err := b.version(name)
		if err == nil && after == before {
			return data, before, nil
		}
		if attempt == 5 {
			return nil, "", fmt.Errorf("hdfs read %q at %s: replaced during every one of %d reads", name, b.where(), attempt+1)
		}
	}
}

func (b *Bucket) readSmall(name string) ([]byte, error) {
	f, err := b.client.Open(b.path(name))
	if err != nil {
		return nil, b.wrap("read", name, err)
	}
	defer f.Close()
	if f.Stat().IsDir() {
		return nil, objstore.NotFound("hdfs", name)
	}
	if f.Stat().Size() > objstore.MaxConditionalSize {
		return nil, fmt.Errorf("hdfs read %q: %d bytes, more than a versioned read takes (%d)", name, f.Stat().Size(), objstore.MaxConditionalSize)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, b.wrap("read", name, err)
	}
	return data, nil
}

// version is the object's inode id; ErrNotFound when there is none.
func (b *Bucket) version(name string) (objstore.Version, error) {
	fi, err := b.client.Stat(b.path(name))
	if err != nil {
		return "", b.wrap("stat", name, err)
	}
	st, ok := fi.Sys().(*hdfsclient.FileStatus)
	if fi.IsDir() || !ok {
		return "", objstore.NotFound("hdfs", name)
	}
	return objstore.Version(strconv.FormatUint(st.GetFileId(), 10)), nil
}

// check says whether the object is at version match (or absent, for
// Absent).
func (b *Bucket) check(name string, match objstore.Version) error {
	cur, err := b.version(name)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		if match == objstore.Absent {
			return nil
		}
	case err != nil:
		return err
	case match != objstore.Absent && cur == match:
		return nil
	}
	return objstore.PreconditionFailed("hdfs", name, match)
}

// UploadIf stages the new content, then compares and renames under the
// name's lock (see above).
func (b *Bucket) UploadIf(ctx context.Context, name string, r io.Reader, match objstore.Version) (err error) {
	if err := objstore.ValidateName(name); err != nil {
		return err
	}
	data, err := objstore.ReadSmall(ctx, "hdfs", name, r)
	if err != nil {
		return err
	}
	// A writer that is behind already needs neither a staged file nor the lock.
	if err := b.check(name, match); err != nil {
		return err
	}
	tmp, err := b.stage(ctx, name, bytes.NewReader(data))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			b.client.Remove(tmp)
		}
	}()
	unlock, err := b.lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := b.check(name, match); err != nil {
		return err
	}
	return b.rename(name, tmp)
}

// lock takes the write lease on name's lock file, creating the file the
// first time, and waits (up to lockWait) while another writer holds it.
func (b *Bucket) lock(ctx context.Context, name string) (unlock func(), err error) {
	dir := b.path(objstore.TempDir) + "/" + lockDir
	if err := b.client.MkdirAll(dir, 0o755); err != nil {
		return nil, b.wrap("lock", name, err)
	}
	sum := sha256.Sum256([]byte(name))
	file := fmt.Sprintf("%s/s%02x", dir, sum[0])
	deadline := time.Now().Add(lockWait)
	delay := 10 * time.Millisecond
	for {
		w, err := b.client.Append(file)
		if errors.Is(err, fs.ErrNotExist) {
			w, err = b.client.Create(file) // also holds the lease until closed
		}
		if err == nil {
			return func() { release(w) }, nil
		}
		if !lockBusy(err) {
			return nil, b.wrap("lock", name, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("hdfs upload %q at %s: its lock %s was held by another writer for %s: %w", name, b.where(), file, lockWait, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// lockBusy: another writer holds the lease, is creating the file, or a
// dead holder's lease is being recovered.
func lockBusy(err error) bool {
	if errors.Is(err, fs.ErrExist) {
		return true
	}
	var remote hdfsclient.Error
	if errors.As(err, &remote) {
		switch remote.Exception() {
		case "org.apache.hadoop.hdfs.protocol.AlreadyBeingCreatedException",
			"org.apache.hadoop.hdfs.protocol.RecoveryInProgressException":
			return true
		}
	}
	return false
}

// release closes the lock file, which gives its lease back. Our client
// renews its leases for as long as it lives, so a release that never
// reaches the NameNode would hold the others up until this process exits:
// it is tried for a while.
func release(w *hdfsclient.FileWriter) {
	delay := 50 * time.Millisecond
	for i := 0; i < 10; i++ {
		if err := w.Close(); err == nil || errors.Is(err, fs.ErrClosed) {
			return
		}
		time.Sleep(delay)
		delay = min(2*delay, 5*time.Second)
	}
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
	// A NameNode stat per read: the price of a handle that another node's
	// replacement of the object cannot leave reading the old file.
	n, err := b.readers.ReadCurrent(name, func(f *hdfsclient.FileReader) (bool, error) {
		now, err := b.client.Stat(b.path(name))
		if err != nil {
			return false, b.wrap("read", name, err)
		}
		return fileID(now) == fileID(f.Stat()), nil
	}, func(f *hdfsclient.FileReader) (int, error) {
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
		if e.Name() == lockDir {
			continue // its files are locks, not uploads
		}
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
