package sharedfile

import (
	"fmt"
	"hash/crc32"
	"os"

	"strata/engine/record"
)

// Writer appends chunks to one active file at a time. One I/O worker of
// the engine owns one Writer (nothing in it is safe for concurrent use):
// a worker batch Adds one chunk per shard it touched, then Commits them
// with one write and one fsync. Once a commit takes the file to
// MaxFileBytes the file is sealed (trailer, read-only) and the next Add
// starts a new file.
type Writer struct {
	d       *Dir
	f       *file // active file; nil before the first Add and after a seal
	buf     []byte
	pending []Chunk
	failed  error
	limit   int // MaxChunkBytes; smaller in tests
}

// NewWriter makes a writer; it creates its first file at its first Add.
func (d *Dir) NewWriter() *Writer { return &Writer{d: d, limit: MaxChunkBytes} }

// Add encodes recs as chunks of shard: records are encoded in the binding
// format at the offsets they carry, which must follow each other. Usually
// one chunk; records past MaxChunkBytes start another. The chunks are
// appended to dst and are written by the next Commit; until then readers
// do not see them. A record that cannot be encoded refuses the whole Add
// and leaves no trace.
func (w *Writer) Add(dst []Chunk, shard uint64, recs []record.Record) ([]Chunk, error) {
	if w.failed != nil {
		return dst, w.failed
	}
	if len(recs) == 0 {
		return dst, nil
	}
	if w.f == nil {
		f, err := w.d.newFile()
		if err != nil {
			return dst, fmt.Errorf("sharedfile: new file: %w", err)
		}
		w.f = f
	}
	start, n := len(w.buf), len(dst)
	chunkAt := -1 // position in buf of the open chunk's header
	var h Header
	closeChunk := func() {
		h.Length = uint32(len(w.buf) - chunkAt - HeaderSize)
		AppendHeader(w.buf[chunkAt:chunkAt], h)
		dst = append(dst, Chunk{Ref: Ref{File: w.f.no, Pos: w.f.size + int64(chunkAt)}, Header: h})
	}
	for i := range recs {
		r := &recs[i]
		if i > 0 && r.Offset != recs[i-1].Offset+1 {
			w.buf = w.buf[:start]
			return dst[:n], fmt.Errorf("sharedfile: shard %d: record %d has offset %d after %d", shard, i, r.Offset, recs[i-1].Offset)
		}
		size := record.Size(r)
		if chunkAt >= 0 && len(w.buf)-chunkAt-HeaderSize+size > w.limit {
			closeChunk()
			chunkAt = -1
		}
		if chunkAt < 0 {
			chunkAt = len(w.buf)
			w.buf = append(w.buf, make([]byte, HeaderSize)...)
			h = Header{Flags: FlagCommits, Shard: shard, First: r.Offset}
		}
		var err error
		if w.buf, err = record.Append(w.buf, r); err != nil {
			w.buf = w.buf[:start]
			return dst[:n], fmt.Errorf("sharedfile: shard %d: %w", shard, err)
		}
		h.Count++
	}
	closeChunk()
	w.pending = append(w.pending, dst[n:]...)
	return dst, nil
}

// Commit writes the chunks added since the last commit with one write and,
// when sync is set, one fsync: once it returns nil they are durable (or,
// without sync, written) and readable. A commit that takes the file to
// MaxFileBytes also writes the seal trailer in the same write, fsyncs
// whatever sync says (a sealed file is trusted without a scan at the next
// start), and returns the sealed file's description.
//
// A failed write is cut off the file and the pending chunks are dropped
// (every request of the batch is refused); a failed fsync fails the
// writer for good: what the kernel dropped cannot be known, so nothing
// more is acknowledged until a restart recovers the file.
func (w *Writer) Commit(sync bool) (sealed *FileInfo, err error) {
	if w.failed != nil {
		return nil, w.failed
	}
	if len(w.buf) == 0 {
		return nil, nil
	}
	f := w.f
	// The commit record goes in the same write as its chunks: recovery
	// takes a batch as written only when the record checks out against
	// the bytes before it.
	w.buf = AppendCommit(w.buf, Commit{Seq: f.commits, Length: uint64(len(w.buf)), Chunks: uint32(len(w.pending)),
		CRC: crc32.Checksum(w.buf, castagnoli)})
	crc := crc32.Update(f.crc, castagnoli, w.buf)
	dataEnd := f.size + int64(len(w.buf))
	seal := dataEnd >= w.d.cfg.MaxFileBytes
	out := w.buf
	if seal {
		out = AppendTrailer(out, Trailer{Flags: FlagCommits, Chunks: f.chunks + uint64(len(w.pending)), DataLen: uint64(dataEnd), CRC: crc})
	}
	if _, err := f.wf.WriteAt(out, f.size); err != nil {
		w.discard()
		if terr := truncateFile(f.wf, f.size); terr != nil {
			w.failed = fmt.Errorf("sharedfile: %s refuses writes until restart: write: %v; cutting it back: %w", f.path, err, terr)
			return nil, w.failed
		}
		return nil, fmt.Errorf("sharedfile: write %s: %w", f.path, err)
	}
	st := &w.d.stats
	st.Commits.Add(1)
	st.Chunks.Add(uint64(len(w.pending)))
	st.Bytes.Add(uint64(len(w.buf)))
	if sync || seal {
		st.Fsyncs.Add(1)
		if err := f.wf.Sync(); err != nil {
			w.discard()
			w.failed = fmt.Errorf("sharedfile: %s refuses writes until restart: fsync: %w", f.path, err)
			return nil, w.failed
		}
	}
	f.size, f.crc, f.chunks, f.commits = dataEnd, crc, f.chunks+uint64(len(w.pending)), f.commits+1
	f.readable.Store(dataEnd)
	w.discard()
	if seal {
		info := w.sealLocal()
		return &info, nil
	}
	return nil, nil
}

// Sync fsyncs the active file (the interval policy's tick, after commits
// without sync).
func (w *Writer) Sync() error {
	if w.failed != nil || w.f == nil {
		return w.failed
	}
	w.d.stats.Fsyncs.Add(1)
	if err := w.f.wf.Sync(); err != nil {
		w.failed = fmt.Errorf("sharedfile: %s refuses writes until restart: fsync: %w", w.f.path, err)
		return w.failed
	}
	return nil
}

func (w *Writer) discard() {
	w.buf = w.buf[:0]
	w.pending = w.pending[:0]
}

// sealLocal closes a file whose trailer is written and synced.
func (w *Writer) sealLocal() FileInfo {
	f := w.f
	w.f = nil
	f.sealed.Store(true)
	w.d.stats.Sealed.Add(1)
	if err := f.wf.Close(); err != nil {
		w.d.log.Warn("closing a sealed shared file", "file", f.path, "err", err)
	}
	f.wf = nil
	if err := os.Chmod(f.path, 0o444); err != nil {
		w.d.log.Warn("making a sealed shared file read-only", "file", f.path, "err", err)
	}
	return f.info()
}

// Seal seals the active file now, whatever its size (the engine's clean
// shutdown, or an age limit): pending chunks are committed first. A file
// with no chunk is removed instead. Returns the sealed file, or nil.
func (w *Writer) Seal() (*FileInfo, error) {
	if w.failed != nil {
		return nil, w.failed
	}
	if len(w.buf) > 0 {
		if sealed, err := w.Commit(true); sealed != nil || err != nil {
			return sealed, err
		}
	}
	f := w.f
	if f == nil {
		return nil, nil
	}
	if f.chunks == 0 {
		w.f = nil
		f.wf.Close()
		w.d.mu.Lock()
		delete(w.d.files, f.no)
		w.d.mu.Unlock()
		return nil, w.d.cfg.FS.Remove(f.path)
	}
	t := AppendTrailer(nil, Trailer{Flags: FlagCommits, Chunks: f.chunks, DataLen: uint64(f.size), CRC: f.crc})
	if _, err := f.wf.WriteAt(t, f.size); err != nil {
		if terr := truncateFile(f.wf, f.size); terr != nil {
			w.failed = fmt.Errorf("sharedfile: %s refuses writes until restart: seal: %v; cutting it back: %w", f.path, err, terr)
			return nil, w.failed
		}
		return nil, fmt.Errorf("sharedfile: seal %s: %w", f.path, err)
	}
	w.d.stats.Fsyncs.Add(1)
	if err := f.wf.Sync(); err != nil {
		w.failed = fmt.Errorf("sharedfile: %s refuses writes until restart: fsync: %w", f.path, err)
		return nil, w.failed
	}
	info := w.sealLocal()
	return &info, nil
}

// Pending is the record bytes of a chunk Add returned and no Commit wrote
// yet: the engine keeps a shard segment's running CRC-32C and size over
// them. They are the writer's buffer: valid until the next Add or Commit.
func (w *Writer) Pending(c Chunk) []byte {
	if w.f == nil || c.File != w.f.no {
		return nil
	}
	at := c.Pos - w.f.size + HeaderSize
	if at < HeaderSize || at+int64(c.Length) > int64(len(w.buf)) {
		return nil
	}
	return w.buf[at : at+int64(c.Length)]
}

// Next is where the next chunk Add makes will lie, or, with chunks
// pending, where the first byte after them goes: every chunk written
// before is at a lower (file, position). A logical truncation records it,
// so recovery can tell a shard's chunks written before the cut (dead past
// it) from those written after.
func (w *Writer) Next() Ref {
	if w.f != nil {
		return Ref{File: w.f.no, Pos: w.f.size + int64(len(w.buf))}
	}
	w.d.mu.RLock()
	defer w.d.mu.RUnlock()
	return Ref{File: w.d.next}
}

// Less orders refs by file, then position: the order chunks were written
// in.
func (r Ref) Less(o Ref) bool { return r.File < o.File || (r.File == o.File && r.Pos < o.Pos) }
