package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"strata/engine/segment"
	"strata/engine/sharedfile"
	"strata/engine/store/storetest"
)

func TestSegmentVerifyAndDump(t *testing.T) {
	dir := t.TempDir()
	e, err := segment.Open(segment.Config{Dir: dir, MaxSegmentBytes: 4096, RollCheckInterval: 5, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.CreateShard(ctx, "cli-0")
	for i := 0; i < 20; i++ {
		e.Append(ctx, "cli-0", storetest.Records(5, i))
	}
	e.Close()
	var out bytes.Buffer
	if err := segmentCmd([]string{"verify", filepath.Join(dir, "cli-0")}, &out); err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "100 records, 0 with problems") {
		t.Fatalf("verify summary:\n%s", out.String())
	}
	out.Reset()
	if err := segmentCmd([]string{"dump", filepath.Join(dir, "cli-0", "0.msg")}, &out); err != nil || !strings.HasPrefix(out.String(), "offset=0 ") {
		t.Fatalf("dump: %v\n%.200s", err, out.String())
	}
	// Bytes past the last file's synced mark (what a crash leaves after
	// the last fsync) are a torn tail, not damage; damage before the mark
	// is, and verify fails.
	files, _ := filepath.Glob(filepath.Join(dir, "cli-0", "*.msg"))
	last := files[len(files)-1]
	data, _ := os.ReadFile(last)
	os.Chmod(last, 0o644)
	for _, tc := range []struct {
		name    string
		file    []byte
		bad     bool
		mention string
	}{
		{"a torn tail", append(bytes.Clone(data), 1, 2, 3), false, fmt.Sprintf("torn tail at byte %d, past byte %d", len(data), len(data))},
		{"damage to synced bytes", func() []byte { d := bytes.Clone(data); d[len(d)/2] ^= 0xff; return d }(), true, "damage to synced bytes"},
		{"the last synced record cut short", data[:len(data)-1], true, "damage to synced bytes"},
	} {
		os.WriteFile(last, tc.file, 0o644)
		out.Reset()
		err := segmentCmd([]string{"verify", filepath.Join(dir, "cli-0")}, &out)
		if (err != nil) != tc.bad || !strings.Contains(out.String(), tc.mention) {
			t.Fatalf("verify of %s: %v (want a failure: %v)\n%s", tc.name, err, tc.bad, out.String())
		}
	}
	// While a service holds the data folder, the mark is read from its
	// file all the same (only the index is locked): the tail is still a
	// torn tail.
	os.WriteFile(last, append(bytes.Clone(data), 1, 2, 3), 0o644)
	e, err = segment.Open(segment.Config{Dir: dir, MaxSegmentBytes: 4096, RollCheckInterval: 5, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	os.WriteFile(last, append(bytes.Clone(data), 1, 2, 3), 0o644) // the start cut it
	out.Reset()
	if err := segmentCmd([]string{"verify", filepath.Join(dir, "cli-0")}, &out); err != nil || !strings.Contains(out.String(), fmt.Sprintf("torn tail at byte %d", len(data))) {
		t.Fatalf("verify of a folder in use with a torn tail: %v\n%s", err, out.String())
	}
}

// `strata segment repair` cuts a shard's active segment at damage found
// inside it, so the shard takes writes again; verify names the damage first.
func TestSegmentRepair(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := segment.Open(segment.Config{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.CreateShard(ctx, "rep-0")
	for i := 0; i < 10; i++ {
		e.Append(ctx, "rep-0", storetest.Records(2, i))
	}
	e.Close()
	path := filepath.Join(dir, "rep-0", "0.msg")
	data, _ := os.ReadFile(path)
	data[len(data)/3] ^= 0xff // inside the log, whole records after it
	os.WriteFile(path, data, 0o644)

	var out bytes.Buffer
	if err := segmentCmd([]string{"verify", filepath.Join(dir, "rep-0")}, &out); err == nil || !strings.Contains(out.String(), "damaged record") {
		t.Fatalf("verify of the damaged shard: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := segmentCmd([]string{"repair", "--shard", "rep-0", "--data-dir", dir}, &out); err != nil || !strings.Contains(out.String(), "takes writes") {
		t.Fatalf("repair: %v\n%s", err, out.String())
	}
	e, err = segment.Open(segment.Config{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Append(ctx, "rep-0", storetest.Records(1, 99)); err != nil {
		t.Fatalf("append after the repair: %v", err)
	}
}

// The segment tools on a shared-file topic's partition: verify and dump
// read its chunks from the shared files; after damage in a synced batch
// (found at a start after a crash) the shard refuses writes, verify names
// the damage, and `strata segment repair` makes it take writes again
// while the other partition in the same file was never refused.
func TestSegmentToolsOnSharedShards(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := segment.Config{Dir: dir, Logger: quiet, Workers: 1, FileModel: func(string) string { return segment.ModelShared }}
	e, err := segment.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, s := range []string{"s-0", "t-0"} {
		if err := e.CreateShard(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 6; i++ {
		for _, s := range []string{"s-0", "t-0"} {
			if _, err := e.Append(ctx, s, storetest.Records(4, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The folder as a crash leaves it: the shared file unsealed.
	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	e.Close()
	os.Remove(filepath.Join(crashed, "LOCK"))

	var out bytes.Buffer
	if err := segmentCmd([]string{"verify", filepath.Join(crashed, "s-0")}, &out); err != nil || !strings.Contains(out.String(), "24 records, 0 with problems") {
		t.Fatalf("verify of a shared shard: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := segmentCmd([]string{"dump", filepath.Join(crashed, "s-0")}, &out); err != nil || strings.Count(out.String(), "offset=") != 24 {
		t.Fatalf("dump of a shared shard: %v\n%.300s", err, out.String())
	}
	files, _ := filepath.Glob(filepath.Join(crashed, "shared", "*.msg"))
	if len(files) != 1 {
		t.Fatalf("shared files %v", files)
	}
	out.Reset()
	if err := segmentCmd([]string{"dump", files[0]}, &out); err != nil || strings.Count(out.String(), "# chunk at byte") != 12 || strings.Count(out.String(), "offset=") != 48 {
		t.Fatalf("dump of a shared file: %v\n%.300s", err, out.String())
	}

	// Damage a record of s-0's second chunk (the file's third): batches
	// committed after it make it damage inside.
	b, _ := os.ReadFile(files[0])
	pos := int64(0)
	for n := 0; n < 2; n++ { // past two chunks and their commit records
		h, err := sharedfile.ParseHeader(b[pos:])
		if err != nil {
			t.Fatal(err)
		}
		pos += h.Size() + sharedfile.HeaderSize
	}
	b[pos+sharedfile.HeaderSize+25] ^= 0xff
	os.WriteFile(files[0], b, 0o644)
	out.Reset()
	if err := segmentCmd([]string{"verify", filepath.Join(crashed, "s-0")}, &out); err == nil || !strings.Contains(out.String(), "BAD at byte") {
		t.Fatalf("verify of the damaged shared shard: %v\n%s", err, out.String())
	}
	cfg.Dir = crashed
	e, err = segment.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, "s-0", storetest.Records(1, 99)); err == nil || !strings.Contains(err.Error(), "strata segment repair --shard s-0") {
		t.Fatalf("append to the damaged shard: %v; want it refused, naming the repair", err)
	}
	if off, err := e.Append(ctx, "t-0", storetest.Records(1, 99)); err != nil || off != 24 {
		t.Fatalf("append to the other shard of the file: offset %d, %v", off, err)
	}
	e.Close()
	out.Reset()
	if err := segmentCmd([]string{"repair", "--shard", "s-0", "--data-dir", crashed}, &out); err != nil || !strings.Contains(out.String(), "ends at offset 4 and takes writes") {
		t.Fatalf("repair: %v\n%s", err, out.String())
	}
	e, err = segment.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if off, err := e.Append(ctx, "s-0", storetest.Records(1, 98)); err != nil || off != 4 {
		t.Fatalf("append after the repair: offset %d, %v; want 4", off, err)
	}
}
