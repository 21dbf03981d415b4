package integrity_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"testing"

	"strata/engine/integrity"
	"strata/engine/leaderepoch"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/sharedfile"
	"strata/engine/store"
	"strata/parquet"
)

// Every corruption error of the engine, the shared files and the cold
// tier answers IsCorruption, as it is and wrapped; errors that are not
// damage in the bytes do not.
func TestEveryCorruptionErrorAnswers(t *testing.T) {
	_, _, recordErr := record.Decode([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 40, 1, 2, 3, 4, 5})
	_, epochErr := leaderepoch.Decode([]byte("not a history"))
	garbage := bytes.Repeat([]byte{0xab}, 64)
	_, parquetErr := parquet.Open(bytes.NewReader(garbage), int64(len(garbage)))
	ioErr := &fs.PathError{Op: "open", Path: "/data/s-0/3.msg", Err: fs.ErrPermission}
	segCorrupt := &segment.CorruptError{Path: "3.msg", Pos: 10, Err: fmt.Errorf("%w: bad crc", record.ErrCorrupt)}
	for _, tc := range []struct {
		name    string
		err     error
		corrupt bool
	}{
		{"record.ErrCorrupt", record.ErrCorrupt, true},
		{"record.ErrShort", record.ErrShort, true},
		{"a record that does not decode", recordErr, true},
		{"sharedfile.ErrCorrupt", sharedfile.ErrCorrupt, true},
		{"sharedfile.ErrShort", sharedfile.ErrShort, true},
		{"leaderepoch.ErrCorrupt", leaderepoch.ErrCorrupt, true},
		{"a leader-epoch history that does not decode", epochErr, true},
		{"a Parquet file that does not open", parquetErr, true},
		{"segment.CorruptError", segCorrupt, true},
		{"segment.CorruptError wrapping no sentinel", &segment.CorruptError{Path: "3.msg", Err: errors.New("short read")}, true},
		{"sharedfile.CorruptError", &sharedfile.CorruptError{Path: "shared/7", Pos: 4, Torn: true, Err: errors.New("bad chunk")}, true},
		{"segment.DamagedError", &segment.DamagedError{Shard: "s-0", Segment: 3, Cause: segCorrupt, NextValid: -1}, true},
		{"segment.DamagedError with no cause", &segment.DamagedError{Shard: "s-0", Segment: 3, NextValid: -1}, true},
		{"segment.SharedDamagedError", &segment.SharedDamagedError{Shard: "s-0", Files: []uint64{7},
			Cause: &sharedfile.CorruptError{Path: "shared/7", Err: sharedfile.ErrCorrupt}}, true},
		{"segment.LocalDamage", &segment.LocalDamage{Shard: "s-0", Segment: 3, Cause: ioErr}, true},
		{"an I/O error", ioErr, false},
		{"the end of a file", io.EOF, false},
		{"an unknown shard", store.ErrUnknownShard, false},
		{"a closed engine", store.ErrClosed, false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.corrupt && tc.err == nil {
				t.Fatal("the case made no error")
			}
			if got := integrity.IsCorruption(tc.err); got != tc.corrupt {
				t.Errorf("IsCorruption(%v) = %v, want %v", tc.err, got, tc.corrupt)
			}
			wrapped := fmt.Errorf("shard s-0: reading offset 5: %w", tc.err)
			if got := integrity.IsCorruption(wrapped); got != tc.corrupt {
				t.Errorf("IsCorruption(%v) = %v, want %v", wrapped, got, tc.corrupt)
			}
			joined := errors.Join(errors.New("scrub"), tc.err)
			if got := integrity.IsCorruption(joined); got != tc.corrupt {
				t.Errorf("IsCorruption(%v) = %v, want %v", joined, got, tc.corrupt)
			}
		})
	}
	// A sentinel is still found as itself, not as another.
	if !errors.Is(record.ErrShort, record.ErrCorrupt) || errors.Is(record.ErrCorrupt, sharedfile.ErrCorrupt) {
		t.Error("the sentinels no longer tell one kind of corruption from another")
	}
}
