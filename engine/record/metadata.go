package record

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Metadata, version 1 (docs/format.md):
//
//	version u8 = 1 | flags u8 | timestamp i64
//	| [key_len u32 | key]                      when flags has flagKey
//	| tag_count u16 | (tag_len u16 | tag)*
//	| header_count u16 | (key_len u16 | key | value_len i32 (-1: null) | value)*
const (
	metadataVersion = 1
	flagKey         = 1 << 0 // the key is present (possibly empty)
	flagNullValue   = 1 << 1 // the value is null; data is empty
	knownFlags      = flagKey | flagNullValue
)

// MetadataSize is the encoded size of r's metadata.
func MetadataSize(r *Record) int {
	n := 1 + 1 + 8 + 2 + 2
	if r.Key != nil {
		n += 4 + len(r.Key)
	}
	for _, t := range r.Tags {
		n += 2 + len(t)
	}
	for _, h := range r.Headers {
		n += 2 + len(h.Key) + 4 + len(h.Value)
	}
	return n
}

func appendMetadata(dst []byte, r *Record) ([]byte, error) {
	if len(r.Tags) > math.MaxUint16 || len(r.Headers) > math.MaxUint16 {
		return dst, fmt.Errorf("record at offset %d: %d tags and %d headers, at most %d of each", r.Offset, len(r.Tags), len(r.Headers), math.MaxUint16)
	}
	var flags byte
	if r.Key != nil {
		flags |= flagKey
	}
	if r.Value == nil {
		flags |= flagNullValue
	}
	dst = append(dst, metadataVersion, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Timestamp))
	if r.Key != nil {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Key)))
		dst = append(dst, r.Key...)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.Tags)))
	for _, t := range r.Tags {
		if len(t) > math.MaxUint16 {
			return dst, fmt.Errorf("record at offset %d: a tag of %d bytes, at most %d", r.Offset, len(t), math.MaxUint16)
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(t)))
		dst = append(dst, t...)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.Headers)))
	for _, h := range r.Headers {
		if len(h.Key) > math.MaxUint16 {
			return dst, fmt.Errorf("record at offset %d: a header key of %d bytes, at most %d", r.Offset, len(h.Key), math.MaxUint16)
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.Key)))
		dst = append(dst, h.Key...)
		if h.Value == nil {
			dst = binary.BigEndian.AppendUint32(dst, math.MaxUint32) // -1
		} else {
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(h.Value)))
			dst = append(dst, h.Value...)
		}
	}
	return dst, nil
}

// metaReader reads fields off a metadata section, remembering the first
// problem so the decoder reads straight through.
type metaReader struct {
	b   []byte
	err error
}

func (m *metaReader) take(n int, what string) []byte {
	if m.err != nil {
		return nil
	}
	if n < 0 || n > len(m.b) {
		m.err = fmt.Errorf("%w: metadata %s: need %d bytes, have %d", ErrCorrupt, what, n, len(m.b))
		return nil
	}
	v := m.b[:n:n]
	m.b = m.b[n:]
	return v
}

func (m *metaReader) u16(what string) int {
	if b := m.take(2, what); b != nil {
		return int(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (m *metaReader) u32(what string) uint32 {
	if b := m.take(4, what); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func decodeMetadata(b []byte, r *Record) (flags byte, err error) {
	m := &metaReader{b: b}
	head := m.take(10, "version, flags and timestamp")
	if m.err != nil {
		return 0, m.err
	}
	if head[0] != metadataVersion {
		return 0, fmt.Errorf("%w: metadata version %d, want %d", ErrCorrupt, head[0], metadataVersion)
	}
	flags = head[1]
	if flags&^knownFlags != 0 {
		return 0, fmt.Errorf("%w: unknown metadata flags %#x", ErrCorrupt, flags)
	}
	r.Timestamp = int64(binary.BigEndian.Uint64(head[2:]))
	if flags&flagKey != 0 {
		r.Key = m.take(int(m.u32("key length")), "key")
		if r.Key == nil && m.err == nil {
			r.Key = []byte{}
		}
	}
	if n := m.u16("tag count"); n > 0 {
		r.Tags = make([]string, 0, min(n, len(m.b)/2))
		for i := 0; i < n && m.err == nil; i++ {
			r.Tags = append(r.Tags, string(m.take(m.u16("tag length"), "tag")))
		}
	}
	if n := m.u16("header count"); n > 0 {
		r.Headers = make([]Header, 0, min(n, len(m.b)/6))
		for i := 0; i < n && m.err == nil; i++ {
			var h Header
			h.Key = string(m.take(m.u16("header key length"), "header key"))
			if vl := m.u32("header value length"); vl != math.MaxUint32 {
				if h.Value = m.take(int(vl), "header value"); h.Value == nil && m.err == nil {
					h.Value = []byte{}
				}
			}
			r.Headers = append(r.Headers, h)
		}
	}
	if m.err == nil && len(m.b) != 0 {
		m.err = fmt.Errorf("%w: %d bytes after the metadata", ErrCorrupt, len(m.b))
	}
	return flags, m.err
}
