package segment

import (
	"fmt"
	"os"
	"time"

	"strata/engine/integrity"
	"strata/engine/record"
)

// LocalDamage is where a shard's local copy was found damaged, at start or
// by a scrub: the records from From on cannot be served from it as they
// were written. A replica's copy is refilled from its leader
// (docs/replication.md, "A damaged copy"); a shard with no other copy
// waits for an operator (strata segment repair).
type LocalDamage struct {
	Shard   string
	Segment uint64
	From    uint64 // the first offset the damaged bytes may hold
	Cause   error
	Found   time.Time
}

func (d *LocalDamage) Error() string {
	return fmt.Sprintf("shard %s: segment %d is damaged from offset %d on: %v", d.Shard, d.Segment, d.From, d.Cause)
}

func (d *LocalDamage) Unwrap() error { return d.Cause }

// Is makes it answer integrity.IsCorruption, whatever it wraps.
func (d *LocalDamage) Is(target error) bool { return target == integrity.ErrCorruption }

// Damage is the damage found in shard name's local copy, nil if none (or
// no such shard). It is forgotten with the shard: a copy made again
// (DeleteShard, CreateShardAt) starts clean.
func (e *Engine) Damage(name string) *LocalDamage {
	e.mu.RLock()
	sh, ok := e.shards[name]
	e.mu.RUnlock()
	if !ok {
		return nil
	}
	return sh.damage.Load()
}

// DamagedFrom is Damage as replication asks for it (replica.Damaged).
func (e *Engine) DamagedFrom(name string) (uint64, error) {
	if d := e.Damage(name); d != nil {
		return d.From, d
	}
	return 0, nil
}

// noteDamage keeps the first damage found in sh: the lowest offset wins,
// so a refill starts below all of it.
func (e *Engine) noteDamage(sh *shard, d *LocalDamage) {
	d.Shard, d.Found = sh.name, e.cfg.Now()
	for {
		old := sh.damage.Load()
		if old != nil && old.From <= d.From {
			return
		}
		if sh.damage.CompareAndSwap(old, d) {
			e.log.Error("a shard's local copy is damaged", "shard", sh.name, "segment", d.Segment, "from_offset", d.From, "err", d.Cause)
			return
		}
	}
}

// checkSealedSize compares a sealed segment's file with the size its seal
// recorded: one stat, so recovery, which trusts sealed segments' bytes
// (Scrub checks those), still finds a file cut short or missing.
func checkSealedSize(s *segment) error {
	st, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", record.ErrCorrupt, s.path, err)
	}
	if st.Size() != s.size {
		return fmt.Errorf("%w: %s is %d bytes, sealed as %d", record.ErrCorrupt, s.path, st.Size(), s.size)
	}
	return nil
}

// DamagedError is why a shard refuses writes: its active segment is
// damaged in bytes that were on disk (before its synced mark), so records
// that were acknowledged may lie past the damage.
type DamagedError struct {
	Shard   string
	Segment uint64
	Pos     int64  // byte position of the damage
	Synced  int64  // the file was on disk up to this byte
	From    uint64 // the offset at the damage: reads stop before it
	// SyncedEnd is the offset after the records on disk up to Synced (0
	// when the mark is from before it was kept): the records from From
	// to it were acknowledged under fsync=batch.
	SyncedEnd uint64
	Cause     error // the *CorruptError
	// NextValid is the byte position of the first whole record after the
	// damage, -1 when none was found before Synced.
	NextValid int64
}

func (e *DamagedError) Error() string {
	after := "no whole record was found after it"
	if e.NextValid >= 0 {
		after = fmt.Sprintf("a whole record follows at byte %d", e.NextValid)
	}
	lost := fmt.Sprintf("offset %d on", e.From)
	if e.SyncedEnd > e.From {
		lost = fmt.Sprintf("offset %d to offset %d", e.From, e.SyncedEnd-1)
	}
	return fmt.Sprintf("shard %s refuses writes: segment %d is damaged at byte %d, in bytes that were on disk (up to byte %d): %v; %s; "+
		"reads stop at the damage, before offset %d; the records on disk from %s are not served; "+
		"`strata segment repair --shard %s` (service stopped) cuts the segment there, losing what follows",
		e.Shard, e.Segment, e.Pos, e.Synced, e.Cause, after, e.From, lost, e.Shard)
}

func (e *DamagedError) Unwrap() error { return e.Cause }

// Is makes it answer integrity.IsCorruption, whatever it wraps.
func (e *DamagedError) Is(target error) bool { return target == integrity.ErrCorruption }
