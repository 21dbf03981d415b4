package kafka

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/bench/load"
	"strata/engine/segment"
)

func TestTmpConsumeProfiles(t *testing.T) {
	dir := os.Getenv("TMP_PROF")
	if dir == "" {
		t.Skip()
	}
	ctx := context.Background()
	eng, err := segment.Open(segment.Config{Dir: t.TempDir(), Workers: 4, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ahead, _ := serveEngine(t, eng, Config{})
	plain, _ := serveEngine(t, eng, Config{MaxReadAheadBytes: -1})
	load.CreateTopic(ctx, ahead, "c", 16, nil)
	c, _ := kgo.NewClient(load.ClientOpts(ahead)...)
	load.Produce(ctx, c, "c", 100_000, 1024, 0, nil)
	c.Close()
	for _, side := range []struct{ name, addr string }{{"plain", plain}, {"ahead", ahead}} {
		load.Consume(ctx, side.addr, "c", 100_000, nil) // warm
		f, _ := os.Create(dir + "/consume-" + side.name + ".cpu")
		pprof.StartCPUProfile(f)
		for i := 0; i < 6; i++ {
			res, err := load.Consume(ctx, side.addr, "c", 100_000, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %.0f rec/s", side.name, res.RecordsPerSec())
		}
		pprof.StopCPUProfile()
		f.Close()
	}
}
