// Package integrity is the one marker of corrupt data: bytes that do not
// hold what was written (a record's CRC, a shared file's chunk, a leader
// epoch history, a sealed segment's size or checksum, a Parquet file's
// pages). Every corruption error of the engine, the shared files and the
// cold tier answers IsCorruption, wrapped or not, so recovery, the
// scrubber and the tools tell damage from a failing read (an I/O error, a
// closed engine) without knowing which layer found it (docs/engine.md).
//
// It imports nothing of strata's: every layer may use it.
package integrity

import "errors"

// ErrCorruption is what every corruption error matches with errors.Is.
var ErrCorruption = errors.New("corrupt data")

// IsCorruption reports whether err, or an error it wraps, is corruption.
func IsCorruption(err error) bool { return errors.Is(err, ErrCorruption) }

// A corruption error type answers by an Is method:
//
//	func (e *CorruptError) Is(target error) bool { return target == integrity.ErrCorruption }
//
// Sentinel is a sentinel error for one kind of corruption (record's
// ErrCorrupt, the shared files' ErrCorrupt): errors.Is finds it as itself
// and as ErrCorruption.
func Sentinel(text string) error { return &sentinel{text} }

type sentinel struct{ text string }

func (s *sentinel) Error() string        { return s.text }
func (s *sentinel) Is(target error) bool { return target == ErrCorruption }
