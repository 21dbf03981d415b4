package sharedfile

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/edsrzf/mmap-go"
)

// Config says where the shared files live and how big they grow.
type Config struct {
	// Dir is the folder of the shared files, {data_dir}/shared.
	Dir string
	// FS is where files are written (vfs.Default). As in engine/segment,
	// reads (mmap, scans) go to the OS files at the same paths, so FS must
	// be backed by them.
	FS vfs.FS
	// MaxFileBytes seals a file once a batch takes it to this size (1 GiB):
	// no file outgrows it by more than one batch.
	MaxFileBytes int64
	// FirstFileNo is the lowest number a new file may take: the engine
	// passes one past the highest its manifest ever named, so a number is
	// never used twice even when the newest files were deleted.
	FirstFileNo uint64
	// SyncedTo, if set, is how far file no was on disk at its writer's
	// last synced commit the engine recorded (0: unknown). A file found
	// at start whose committed chunks end before it lost bytes that were
	// synced, whose chunks were acknowledged: it is damage, reported and
	// kept, not a torn tail to cut (docs/engine.md, "Recovery"). Its
	// error (the mark there but unreadable) refuses the file's recovery.
	SyncedTo func(no uint64) (int64, error)
	Logger   *slog.Logger
}

// Dir is the set of shared files of a data folder: the global file-number
// sequence, the read side (mmap) of every file, and removal.
type Dir struct {
	cfg Config
	log *slog.Logger

	mu    sync.RWMutex
	files map[uint64]*file
	next  uint64

	stats Stats
}

// Stats counts the file layer's work since Open, for the engine's
// Prometheus collector (cmd/strata's engineCollector) to export.
type Stats struct {
	Commits atomic.Uint64 // Commits that wrote chunks
	Fsyncs  atomic.Uint64 // fsyncs of shared files by writers (commits, seals, Sync)
	Chunks  atomic.Uint64
	Bytes   atomic.Uint64 // bytes of chunks written, headers included
	Sealed  atomic.Uint64 // files sealed by writers and by recovery
	// CutBytes counts the bytes of torn tails recovery cut; Damaged the
	// files found damaged inside (left unsealed for the engine to decide).
	CutBytes atomic.Uint64
	Damaged  atomic.Uint64
}

// Stats is the layer's counters.
func (d *Dir) Stats() *Stats { return &d.stats }

// FileInfo describes one shared file.
type FileInfo struct {
	No   uint64
	Path string
	// DataLen is the bytes of chunks (the trailer's position once sealed).
	DataLen int64
	Chunks  uint64
	// CRC is the CRC-32C of the DataLen bytes: the file's checksum.
	CRC    uint32
	Sealed bool
	// Damaged is a file found damaged inside at Open: never written again,
	// never sealed, and removable like a sealed file once nothing needs it.
	Damaged bool
}

// Recovered is what Open found in one file.
type Recovered struct {
	FileInfo
	// Chunks of a file that was not sealed (the active file of a writer at
	// a crash), scanned whole; nil for a sealed file, which Dir.Chunks lists.
	Chunks []Chunk
	// Cut is the number of bytes of a torn tail removed.
	Cut int64
	// Damage is damage inside the file with whole chunks after it: nothing
	// was cut and the file was left unsealed, for the engine to decide.
	Damage *CorruptError
	// Damages is every damage inside, in order (Damage is the first);
	// After the whole chunks after the first, past any others: the chunks
	// of shards whose logs may go on past the damage, readable like the
	// ones before it.
	Damages []*CorruptError
	After   []Chunk
}

// file is one shared file. Readers use the mmap view up to readable; only
// the owning Writer touches the write side.
type file struct {
	no       uint64
	path     string
	maxBytes int64 // what to map of an active file: its cap and the batch past it

	mu       sync.RWMutex
	mm       mmap.MMap
	removed  bool
	readable atomic.Int64 // bytes of whole, committed chunks

	sealed  atomic.Bool
	damaged bool
	// made by a writer in this process (not found at Open): unsealed, it
	// is a writer's active file; a file found unsealed at Open is damaged.
	made bool
	// Write side (the Writer's; fixed once sealed).
	wf     vfs.File
	size   int64 // data bytes written (the trailer excluded)
	crc    uint32
	chunks uint64
	// commits is the number of commit records written (the next one's
	// seq).
	commits uint64
}

// ErrGone is a read of a file that is not (or no longer) there: Remove
// took it while the reader's view of a shard still named it. The engine
// reads again with a fresh view, which sends those offsets to the cold
// tier.
var ErrGone = errors.New("the shared file was removed")

// FileName is the name of shared file no: the number zero-padded to 20
// digits, so names sort as numbers do.
func FileName(no uint64) string { return fmt.Sprintf("%020d.msg", no) }

func parseName(name string) (uint64, bool) {
	var no uint64
	if n, err := fmt.Sscanf(name, "%d.msg", &no); err != nil || n != 1 || name != FileName(no) {
		return 0, false
	}
	return no, true
}

// Open opens the shared files of cfg.Dir, making the folder if needed. A
// file found sealed (read-only, a valid trailer at its end) is trusted as
// it stands (its checksum, in the trailer, is not checked again: each
// record's own CRC is, when read). A file found unsealed was a
// writer's active file at a crash: it is scanned whole, a torn tail is cut
// and fsynced, and it is sealed, so writers always start new files and a
// change of writer count between starts does not matter. Damage inside a
// file, with whole chunks after it, is reported and leaves the file as it
// is. A file with no whole chunk is removed. Open returns one Recovered
// per file kept, in file-number order.
func Open(cfg Config) (*Dir, []Recovered, error) {
	if cfg.Dir == "" {
		return nil, nil, errors.New("sharedfile: Config.Dir is empty")
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 1 << 30
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Dir{cfg: cfg, log: cfg.Logger.With("component", "sharedfile"), files: map[uint64]*file{}, next: cfg.FirstFileNo}
	if err := cfg.FS.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, nil, err
	}
	names, err := cfg.FS.List(cfg.Dir)
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	var out []Recovered
	for _, name := range names {
		no, ok := parseName(name)
		if !ok {
			continue
		}
		rec, err := d.recoverFile(no)
		if err != nil {
			return nil, nil, err
		}
		if rec.Path != "" {
			out = append(out, rec)
		}
		d.next = max(d.next, no+1)
	}
	return d, out, nil
}

func (d *Dir) path(no uint64) string { return filepath.Join(d.cfg.Dir, FileName(no)) }

func (d *Dir) syncedTo(no uint64) (int64, error) {
	if d.cfg.SyncedTo == nil {
		return 0, nil
	}
	return d.cfg.SyncedTo(no)
}

func (d *Dir) recoverFile(no uint64) (Recovered, error) {
	path := d.path(no)
	f := &file{no: no, path: path}
	rf, err := os.Open(path)
	if err != nil {
		return Recovered{}, err
	}
	defer rf.Close()
	st, err := rf.Stat()
	if err != nil {
		return Recovered{}, err
	}
	size := st.Size()
	// Only a read-only file was sealed here: the last bytes of an active
	// file are a client's record value, which could be made to look like
	// a trailer.
	if size >= HeaderSize && st.Mode().Perm()&0o200 == 0 {
		tail := make([]byte, HeaderSize)
		if _, err := rf.ReadAt(tail, size-HeaderSize); err == nil {
			if t, err := ParseTrailer(tail); err == nil && t.DataLen == uint64(size-HeaderSize) {
				f.size, f.crc, f.chunks = int64(t.DataLen), t.CRC, t.Chunks
				f.readable.Store(f.size)
				f.sealed.Store(true)
				d.files[no] = f
				return Recovered{FileInfo: f.info()}, nil
			}
		}
	}
	synced, err := d.syncedTo(no)
	if err != nil {
		return Recovered{}, fmt.Errorf("shared file %s: %w", path, err)
	}
	res := Scan(no, path, rf, size)
	rec := Recovered{Chunks: res.Chunks}
	f.size, f.crc, f.chunks = res.End, res.CRC, uint64(len(res.Chunks))
	f.readable.Store(f.size)
	var ce *CorruptError
	inside := errors.As(res.Err, &ce) && !ce.Torn
	if !inside && res.End < synced {
		// What a torn tail would be cut at lies before bytes that were on
		// disk: they were lost since (a disk fault, a cut file), and the
		// chunks in them were acknowledged. Kept as damage from the end
		// of what checks out to the synced byte, for the engine to find
		// the shards whose chunks lay there.
		ce = &CorruptError{Path: path, Pos: res.End, NextValid: synced, Lost: true,
			Err: fmt.Errorf("%w: its committed chunks end at byte %d", ErrCorrupt, res.End)}
		d.log.Error("a shared file lost bytes that were on disk: left as it is, unsealed",
			"file", path, "at_byte", res.End, "synced_to_byte", synced, "bytes", size)
		rec.Damage, rec.Damages = ce, []*CorruptError{ce}
		f.damaged = true
		d.stats.Damaged.Add(1)
		d.files[no] = f
		rec.FileInfo = f.info()
		return rec, nil
	}
	if inside {
		d.log.Error("a shared file is damaged inside, with whole chunks after the damage: left as it is, unsealed",
			"file", path, "at_byte", ce.Pos, "next_valid_chunk_at", ce.NextValid, "err", ce.Err)
		rec.Damage, rec.Damages, rec.After = ce, res.Damages, res.After
		// The chunks after the damage are read as any others: readers stop
		// at the end of what checks out there.
		f.size, f.damaged = res.AfterEnd, true
		f.readable.Store(f.size)
		d.stats.Damaged.Add(1)
		d.files[no] = f
		rec.FileInfo = f.info()
		return rec, nil
	}
	if len(res.Chunks) == 0 && res.Sealed == nil {
		// Created, and the process died before a chunk was committed in it:
		// it holds nothing. Its number stays used (Open's sequence).
		d.log.Info("removing a shared file with no chunk", "file", path, "bytes", size)
		return Recovered{}, d.cfg.FS.Remove(path)
	}
	if st.Mode().Perm()&0o200 == 0 {
		// Read-only means sealed by this layer, so a 0444 file without a valid
		// trailer was damaged after its seal; it is cut and sealed again.
		os.Chmod(path, 0o644)
	}
	wf, err := d.cfg.FS.OpenReadWrite(path)
	if err != nil {
		return Recovered{}, err
	}
	defer wf.Close()
	if res.Err != nil {
		d.log.Warn("cutting a torn shared-file tail", "file", path, "at_byte", res.End,
			"dropped_bytes", size-res.End, "reason", res.Err)
		if err := truncateFile(wf, res.End); err != nil {
			return Recovered{}, fmt.Errorf("truncate %s: %w", path, err)
		}
		rec.Cut = size - res.End
		d.stats.CutBytes.Add(uint64(rec.Cut))
	}
	if res.Sealed == nil {
		// The trailer makes the next start trust the file without a scan.
		t := Trailer{Chunks: f.chunks, DataLen: uint64(f.size), CRC: f.crc}
		if res.Commits {
			t.Flags = FlagCommits
		}
		if _, err := wf.WriteAt(AppendTrailer(nil, t), f.size); err != nil {
			return Recovered{}, fmt.Errorf("seal %s: %w", path, err)
		}
	}
	if err := wf.Sync(); err != nil {
		return Recovered{}, fmt.Errorf("fsync %s: %w", path, err)
	}
	os.Chmod(path, 0o444)
	f.sealed.Store(true)
	d.stats.Sealed.Add(1)
	d.files[no] = f
	rec.FileInfo = f.info()
	return rec, nil
}

func (f *file) info() FileInfo {
	return FileInfo{No: f.no, Path: f.path, DataLen: f.size, Chunks: f.chunks, CRC: f.crc, Sealed: f.sealed.Load(), Damaged: f.damaged}
}

// Files lists the files, in number order.
func (d *Dir) Files() []FileInfo {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]FileInfo, 0, len(d.files))
	for _, f := range d.files {
		if f.sealed.Load() || f.damaged {
			out = append(out, f.info())
		} else {
			// The writer changes an active file's counters: show what
			// readers may see.
			out = append(out, FileInfo{No: f.no, Path: f.path, DataLen: f.readable.Load()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].No < out[j].No })
	return out
}

func (d *Dir) file(no uint64) (*file, error) {
	d.mu.RLock()
	f := d.files[no]
	d.mu.RUnlock()
	if f == nil {
		return nil, fmt.Errorf("sharedfile: no file %d in %s: %w", no, d.cfg.Dir, ErrGone)
	}
	return f, nil
}

// newFile creates the next numbered file and syncs its name into the
// folder, so a chunk acknowledged in it is found after a machine crash.
func (d *Dir) newFile() (*file, error) {
	d.mu.Lock()
	no := d.next
	d.next++
	d.mu.Unlock()
	path := d.path(no)
	// A file number is never used twice: an existing file is refused (one
	// process owns the data folder, as in engine/segment).
	if _, err := d.cfg.FS.Stat(path); err == nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: os.ErrExist}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	wf, err := d.cfg.FS.Create(path)
	if err != nil {
		return nil, err
	}
	if err := syncDir(d.cfg.FS, d.cfg.Dir); err != nil {
		wf.Close()
		return nil, err
	}
	f := &file{no: no, path: path, wf: wf, made: true, maxBytes: d.cfg.MaxFileBytes + 1<<20}
	d.mu.Lock()
	d.files[no] = f
	d.mu.Unlock()
	return f, nil
}

// Remove deletes a sealed file, or one found damaged at Open, once no
// shard segment refers to it (the engine's bookkeeping). Readers in the
// middle of a chunk finish it; later reads of the file fail.
func (d *Dir) Remove(no uint64) error {
	f, err := d.file(no)
	if err != nil {
		return err
	}
	if !f.sealed.Load() && !f.damaged {
		return fmt.Errorf("sharedfile: file %d is a writer's active file; seal it first", no)
	}
	d.mu.Lock()
	delete(d.files, no)
	d.mu.Unlock()
	f.mu.Lock()
	f.removed = true
	if f.mm != nil {
		f.mm.Unmap()
		f.mm = nil
	}
	f.mu.Unlock()
	return d.cfg.FS.Remove(f.path)
}

// Close unmaps every file. Writers are sealed (Writer.Seal) or dropped
// first: their open files are theirs to close.
func (d *Dir) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.files {
		f.mu.Lock()
		if f.mm != nil {
			f.mm.Unmap()
			f.mm = nil
		}
		f.removed = true
		f.mu.Unlock()
	}
	return nil
}

// view returns the file's first n bytes (n at most readable), mapping or
// re-mapping the file as needed. The caller holds f.mu.RLock until done
// with the bytes; view may drop it to re-map.
func (f *file) view(n int64) ([]byte, error) {
	for try := 0; ; try++ {
		if f.removed {
			return nil, fmt.Errorf("sharedfile: %s: %w", f.path, ErrGone)
		}
		if int64(len(f.mm)) >= n {
			return f.mm[:n], nil
		}
		if try == 3 {
			return nil, fmt.Errorf("sharedfile: %s: mapped %d bytes, need %d", f.path, len(f.mm), n)
		}
		f.mu.RUnlock()
		f.mu.Lock()
		err := f.remapLocked(n)
		f.mu.Unlock()
		f.mu.RLock()
		if err != nil {
			return nil, err
		}
	}
}

func (f *file) remapLocked(n int64) error {
	if f.removed || int64(len(f.mm)) >= n {
		return nil
	}
	if f.mm != nil {
		if err := f.mm.Unmap(); err != nil {
			return fmt.Errorf("sharedfile: %s: unmap: %w", f.path, err)
		}
		f.mm = nil
	}
	rf, err := os.Open(f.path)
	if err != nil {
		return fmt.Errorf("sharedfile: %w", err)
	}
	// The mapping outlives the descriptor: no fd is held per file.
	defer rf.Close()
	length := n
	if !f.sealed.Load() {
		// An active file grows: mapping up to its cap at once (past the end
		// of the file, which is allowed as long as nothing reads there:
		// readers stop at readable) saves a re-map per commit.
		length = max(n, f.maxBytes)
	}
	mm, err := mmap.MapRegion(rf, int(length), mmap.RDONLY, 0, 0)
	if err != nil {
		return fmt.Errorf("sharedfile: %s: mmap: %w", f.path, err)
	}
	f.mm = mm
	return nil
}

// truncateFile cuts f to size (vfs.File has no Truncate in Pebble v1.1;
// see engine/segment's truncateFile).
func truncateFile(f vfs.File, size int64) error {
	if t, ok := f.(interface{ Truncate(int64) error }); ok {
		return t.Truncate(size)
	}
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return fmt.Errorf("truncate: the file (%T) has neither a Truncate method nor a descriptor", f)
	}
	return syscall.Ftruncate(int(fd), size)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// FirstOpen is the lowest number of a file still taking chunks (a
// writer's active file), or the number the next new file will take when
// none is open: every chunk written from now on lies in a file numbered at
// least this.
func (d *Dir) FirstOpen() uint64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	first := d.next
	for no, f := range d.files {
		if f.made && !f.sealed.Load() && no < first {
			first = no
		}
	}
	return first
}
