package segment

import (
	"fmt"
	"os"
	"time"

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
