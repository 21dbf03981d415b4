package sharedfile

import (
	"fmt"
)

// ReadChunk checks the chunk at ref (header, records, offsets) and calls
// fn with its header and record bytes. The bytes are the file's mapping:
// valid only during fn, and fn must not keep them. Only committed chunks
// can be read; a ref past them, or one whose header is not a chunk of the
// shard it names (when shard is not nil), is an error.
func (d *Dir) ReadChunk(ref Ref, shard *uint64, fn func(h Header, recs []byte) error) error {
	f, err := d.file(ref.File)
	if err != nil {
		return err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := f.readable.Load()
	if ref.Pos < 0 || ref.Pos+HeaderSize > n {
		return fmt.Errorf("sharedfile: %s: no chunk at byte %d (%d bytes readable)", f.path, ref.Pos, n)
	}
	b, err := f.view(n)
	if err != nil {
		return err
	}
	h, recs, err := DecodeChunk(b[ref.Pos:])
	if err != nil {
		return fmt.Errorf("sharedfile: %s at byte %d: %w", f.path, ref.Pos, err)
	}
	if shard != nil && h.Shard != *shard {
		return fmt.Errorf("sharedfile: %s at byte %d: a chunk of shard %d, not %d", f.path, ref.Pos, h.Shard, *shard)
	}
	return fn(h, recs)
}

// Chunks lists the committed chunks of a file by hopping from header to
// header (checking headers, not records): what rebuilds a lost index of a
// sealed file, and what Shards reads.
func (d *Dir) Chunks(no uint64) ([]Chunk, error) {
	f, err := d.file(no)
	if err != nil {
		return nil, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := f.readable.Load()
	b, err := f.view(n)
	if err != nil {
		return nil, err
	}
	var out []Chunk
	for pos := int64(0); pos < n; {
		if kind, _ := kindOf(b[pos:]); kind == KindCommit {
			pos += HeaderSize
			continue
		}
		h, err := ParseHeader(b[pos:])
		if err == nil && pos+h.Size() > n {
			err = ErrShort
		}
		if err != nil {
			return out, fmt.Errorf("sharedfile: %s at byte %d: %w", f.path, pos, err)
		}
		out = append(out, Chunk{Ref: Ref{File: no, Pos: pos}, Header: h})
		pos += h.Size()
	}
	return out, nil
}
