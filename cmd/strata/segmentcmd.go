package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"strata/engine/integrity"
	"strata/engine/segment"
)

// segmentCmd runs the offline segment tools: they read files directly and
// need no running service.
func segmentCmd(args []string, out io.Writer) error {
	if len(args) > 0 && args[0] == "repair" {
		return repairCmd(args[1:], out)
	}
	if len(args) != 2 {
		return errors.New("usage: strata segment dump FILE|DIR | strata segment verify DIR | strata segment repair --shard S [--config FILE]")
	}
	switch args[0] {
	case "dump":
		// A shared shard's folder holds no segment file: its records are
		// read from the shared files; a shared file is dumped chunk by chunk.
		if dataDir, shard, ok := segment.SharedShardDir(args[1]); ok {
			return segment.DumpShared(dataDir, shard, out)
		}
		if filepath.Base(filepath.Dir(filepath.Clean(args[1]))) == "shared" {
			return segment.DumpSharedFile(args[1], out)
		}
		return segment.Dump(args[1], out)
	case "verify":
		var progress func(done, total int)
		if isTerminal(os.Stderr) {
			progress = func(done, total int) { fmt.Fprintf(os.Stderr, "\rverified %d/%d files", done, total) }
		}
		var reports []segment.FileReport
		var err error
		if dataDir, shard, ok := segment.SharedShardDir(args[1]); ok {
			reports, err = segment.VerifyShared(dataDir, shard)
		} else {
			reports, err = segment.VerifyDir(args[1], progress)
		}
		if progress != nil {
			fmt.Fprintln(os.Stderr)
		}
		if err != nil {
			return err
		}
		bad, torn := 0, 0
		var records int
		for _, r := range reports {
			status := "ok"
			switch {
			case r.TornTail:
				// Bytes no fsync covered, nothing of them acknowledged
				// under fsync=batch: what a crash leaves, not damage.
				status = fmt.Sprintf("torn tail at byte %d, past byte %d (what the last fsync covered): the next start cuts it: %v", r.ProblemAt, r.Synced, r.Problem)
				torn++
			case r.Problem != nil && !integrity.IsCorruption(r.Problem):
				// Not damage found in the bytes: the file could not be read.
				status = fmt.Sprintf("NOT CHECKED: %v", r.Problem)
				bad++
			case r.Problem != nil:
				status = fmt.Sprintf("BAD at byte %d: %v", r.ProblemAt, r.Problem)
				if r.Synced >= 0 {
					status += fmt.Sprintf(" (the file was on disk up to byte %d: damage to synced bytes; the shard refuses writes until `strata segment repair`)", r.Synced)
				}
				bad++
			}
			fmt.Fprintf(out, "%s\t%d records\toffsets %d..%d\t%d bytes\t%s\n", r.Path, r.Records, r.FirstOffset, r.LastOffset, r.Bytes, status)
			records += r.Records
		}
		fmt.Fprintf(out, "%d files, %d records, %d with problems, %d with a torn tail\n", len(reports), records, bad, torn)
		if bad > 0 {
			return fmt.Errorf("%d of %d segment files have problems", bad, len(reports))
		}
		return nil
	}
	return fmt.Errorf("strata segment: unknown command %q (want dump, verify or repair)", args[0])
}

// repairCmd cuts a shard's active segment at damage found inside it (for
// a shard in the shared files: ends its log where the damage of a shared
// file began), with the service stopped: the shard then takes writes
// again, and the records after the damage are gone. Without it the shard
// serves what comes before the damage and refuses writes
// (strata_engine_damaged_shards).
func repairCmd(args []string, out io.Writer) error {
	var shard string
	for i := 0; i < len(args); i++ {
		if args[i] == "--shard" && i+1 < len(args) {
			shard = args[i+1]
			args = append(args[:i:i], args[i+2:]...)
			break
		}
	}
	if shard == "" {
		return errors.New("usage: strata segment repair --shard S [--config FILE] [--data-dir DIR]")
	}
	cfg, err := configFlags("segment repair", args)
	if err != nil {
		return err
	}
	e, err := segment.Open(segment.Config{Dir: cfg.DataDir, Logger: newLogger(cfg.Log, os.Stderr)})
	if err != nil {
		return err
	}
	defer e.Close()
	if err := e.Repair(context.Background(), shard); err != nil {
		return err
	}
	_, high, _ := e.Watermarks(context.Background(), shard)
	fmt.Fprintf(out, "shard %s repaired: its log now ends at offset %d and takes writes\n", shard, high)
	return nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
