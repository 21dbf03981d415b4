package segment

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestVerifyDirAndDump(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxSegmentBytes, cfg.RollCheckInterval = 2048, 5
	e := open(t, cfg)
	fill(t, e, "v-0", 60)
	dir := e.shards["v-0"].dir
	e.Close()
	reports, err := VerifyDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, r := range reports {
		if r.Problem != nil {
			t.Fatalf("%s: %v", r.Path, r.Problem)
		}
		total += r.Records
	}
	if total != 60 || len(reports) < 3 {
		t.Fatalf("verified %d records in %d files, want 60 in several", total, len(reports))
	}
	var out bytes.Buffer
	if err := Dump(segmentPath(dir, 0), &out); err != nil {
		t.Fatal(err)
	}
	if first := strings.SplitN(out.String(), "\n", 2)[0]; !strings.HasPrefix(first, "offset=0 pos=0 ") || !strings.Contains(first, `key="key-`) {
		t.Fatalf("dump's first line: %q", first)
	}
	// A missing middle file breaks the offset sequence, and the report says where.
	os.Remove(segmentPath(dir, 1))
	reports, _ = VerifyDir(dir, nil)
	if reports[1].Problem == nil || !strings.Contains(reports[1].Problem.Error(), "was expected") {
		t.Fatalf("a gap between files: %+v", reports[1])
	}
}
