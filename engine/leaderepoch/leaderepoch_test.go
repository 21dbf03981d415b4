package leaderepoch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"

	"strata/engine/store"
)

func ent(epoch int32, start uint64) store.EpochEntry {
	return store.EpochEntry{Epoch: epoch, Start: start}
}

func build(t *testing.T, entries ...store.EpochEntry) History {
	t.Helper()
	var h History
	for _, e := range entries {
		var err error
		if h, _, err = h.Assign(e.Epoch, e.Start); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func TestAssign(t *testing.T) {
	base := []store.EpochEntry{ent(1, 0), ent(3, 10)}
	for _, tc := range []struct {
		name    string
		epoch   int32
		start   uint64
		want    string
		changed bool
		err     string
	}{
		{"same epoch later", 3, 15, "1@0 3@10", false, ""},
		{"same epoch at its start", 3, 10, "1@0 3@10", false, ""},
		{"newer epoch later", 4, 12, "1@0 3@10 4@12", true, ""},
		{"newer epoch at the latest start replaces it", 5, 10, "1@0 5@10", true, ""},
		{"same epoch earlier", 3, 9, "", false, "epoch 3 at offset 9: the epoch already starts at 10"},
		{"older epoch", 2, 20, "", false, "epoch 2 at offset 20: older than the latest epoch 3"},
		{"newer epoch earlier", 4, 9, "", false, "epoch 4 at offset 9: before epoch 3's start 10"},
		{"negative epoch", -1, 20, "", false, "the epoch must be >= 0"},
		{"offset past 2^63", 4, 1 << 63, "", false, "below 2^63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := build(t, base...)
			before := h.String()
			got, changed, err := h.Assign(tc.epoch, tc.start)
			if h.String() != before {
				t.Fatalf("Assign changed its receiver: %s, was %s", h, before)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Assign(%d, %d) = %v, want an error saying %q", tc.epoch, tc.start, err, tc.err)
				}
				if tc.epoch >= 0 && tc.start <= MaxStart && !errors.Is(err, store.ErrEpochOrder) {
					t.Fatalf("Assign(%d, %d) = %v, not ErrEpochOrder", tc.epoch, tc.start, err)
				}
				return
			}
			if err != nil || got.String() != tc.want || changed != tc.changed {
				t.Fatalf("Assign(%d, %d) = %s, %v, %v; want %s, %v", tc.epoch, tc.start, got, changed, err, tc.want, tc.changed)
			}
		})
	}
}

func TestEpochAt(t *testing.T) {
	h := build(t, store.EpochEntry{Epoch: 2, Start: 5}, store.EpochEntry{Epoch: 4, Start: 9})
	for _, tc := range []struct {
		offset uint64
		epoch  int32
		next   uint64
		ok     bool
	}{
		{0, Undefined, 5, true},
		{5, 2, 9, true},
		{8, 2, 9, true},
		{9, 4, 0, false},
		{100, 4, 0, false},
	} {
		e, n, ok := h.EpochAt(tc.offset)
		if e != tc.epoch || n != tc.next || ok != tc.ok {
			t.Errorf("EpochAt(%d) = %d, %d, %v; want %d, %d, %v", tc.offset, e, n, ok, tc.epoch, tc.next, tc.ok)
		}
	}
	if e, _, ok := History(nil).EpochAt(3); e != Undefined || ok {
		t.Errorf("empty history: EpochAt(3) = %d, %v", e, ok)
	}
}

func TestTruncations(t *testing.T) {
	h := build(t, store.EpochEntry{Epoch: 1, Start: 0}, store.EpochEntry{Epoch: 3, Start: 10}, store.EpochEntry{Epoch: 4, Start: 20})
	for _, tc := range []struct {
		name string
		got  History
		want string
	}{
		{"from end inside the latest", h.TruncateFromEnd(25), "1@0 3@10 4@20"},
		{"from end at an epoch's start", h.TruncateFromEnd(20), "1@0 3@10"},
		{"from end to nothing", h.TruncateFromEnd(0), "empty"},
		{"from start inside an epoch", h.TruncateFromStart(12), "3@12 4@20"},
		{"from start at an epoch's start", h.TruncateFromStart(20), "4@20"},
		{"from start at the first start", h.TruncateFromStart(0), "1@0 3@10 4@20"},
		{"from start past the last start", h.TruncateFromStart(30), "4@30"},
	} {
		if tc.got.String() != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, tc.got, tc.want)
		}
	}
	if h.String() != "1@0 3@10 4@20" {
		t.Fatalf("the truncations changed their receiver: %s", h)
	}
	// A later Assign on a truncated history must not write into the
	// original's backing array.
	cut := h.TruncateFromEnd(20)
	if _, _, err := cut.Assign(9, 15); err != nil {
		t.Fatal(err)
	}
	if h.String() != "1@0 3@10 4@20" {
		t.Fatalf("Assign on a truncated copy changed the original: %s", h)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []store.EpochEntry
	}{
		{"empty", nil},
		{"one", []store.EpochEntry{ent(0, 0)}},
		{"several", []store.EpochEntry{ent(0, 0), ent(1, 40), ent(4, 41), ent(9, 1000)}},
		{"largest", []store.EpochEntry{ent(2147483646, MaxStart)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := build(t, tc.entries...)
			b := h.Encode()
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !slices.Equal(got, h) {
				t.Fatalf("round trip: %v, want %v", got, h)
			}
			if again := got.Encode(); !bytes.Equal(again, b) {
				t.Fatalf("re-encoding changed the bytes: %x, want %x", again, b)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	valid := func() []byte {
		return build(t, store.EpochEntry{Epoch: 1, Start: 0}, store.EpochEntry{Epoch: 3, Start: 10}).Encode()
	}
	// resum gives a changed history a valid checksum again, so the decoder
	// must find what is wrong with its content.
	resum := func(b []byte) []byte {
		body := b[:len(b)-4]
		return binary.BigEndian.AppendUint32(body[:len(body):len(body)], crc32.Checksum(body, castagnoli))
	}
	for _, tc := range []struct {
		name string
		b    func() []byte
		want string
	}{
		{"short", func() []byte { return []byte("SLEH") }, "fewer than"},
		{"magic", func() []byte { b := valid(); b[0] = 'X'; return resum(b) }, "magic"},
		{"version", func() []byte { b := valid(); b[4] = 2; return resum(b) }, "version 2"},
		{"count", func() []byte { b := valid(); b[8] = 3; return resum(b) }, "3 entries"},
		{"checksum", func() []byte { b := valid(); b[12] ^= 1; return b }, "checksum"},
		{"epochs backwards", func() []byte { b := valid(); b[9+12+3] = 1; return resum(b) }, "does not follow"},
		{"negative epoch", func() []byte { b := valid(); b[9] = 0x80; return resum(b) }, ">= 0"},
		{"offset past 2^63", func() []byte { b := valid(); b[9+12+4] = 0x80; return resum(b) }, "below 2^63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.b())
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrCorrupt saying %q", err, tc.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, h := range []History{nil, {ent(0, 0)}, {ent(0, 0), ent(2, 7), ent(5, 9)}} {
		f.Add(h.Encode())
	}
	f.Add([]byte("SLEH\x01\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if !bytes.Equal(h.Encode(), b) {
			t.Fatalf("decode then encode changed the bytes:\n in %x\nout %x", b, h.Encode())
		}
		// A decoded history is one Assign could have built.
		var again History
		for _, e := range h {
			if again, _, err = again.Assign(e.Epoch, e.Start); err != nil {
				t.Fatalf("decoded %v, which Assign refuses: %v", h, err)
			}
		}
		if !slices.Equal(again, h) {
			t.Fatalf("decoded %v, Assign builds %v from it", h, again)
		}
	})
}
