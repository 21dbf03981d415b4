package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The service is killed with SIGKILL while franz-go produces with acks=all,
// three times over the same data: after each restart every acknowledged
// record is there, at its acknowledged offset, with its bytes.
func TestServiceKilledLosesNothingAcknowledged(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "strata")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	type ack struct {
		partition int32
		offset    int64
		value     string
	}
	var acked []ack
	for round := 0; round < 3; round++ {
		cmd := exec.Command(bin, "serve", "--data-dir", dir, "--kafka-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--set", "cold.local.dir="+dir+"/cold", "--set", "kafka.default_partitions=4", "--set", "segment.max_bytes=64KiB",
			"--set", "segment.roll_check_interval=50")
		logs, _ := cmd.StdoutPipe() // the service logs to stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		addr := ""
		deadline := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if _, after, ok := strings.Cut(sc.Text(), "kafka_addr="); ok {
				addr = strings.Fields(after)[0]
				break
			}
		}
		go func() {
			for sc.Scan() {
			}
		}()
		deadline.Stop()
		if addr == "" {
			cmd.Process.Kill()
			t.Fatal("the service did not report its Kafka address")
		}
		if round > 0 {
			checkAcked := func() {
				c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("crash"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				want := map[string]ack{}
				for _, a := range acked {
					want[fmt.Sprint(a.partition, "/", a.offset)] = a
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for len(want) > 0 {
					fs := c.PollFetches(ctx)
					if ctx.Err() != nil {
						t.Fatalf("round %d: %d acknowledged records not found after the kill", round, len(want))
					}
					fs.EachRecord(func(r *kgo.Record) {
						k := fmt.Sprint(r.Partition, "/", r.Offset)
						if a, ok := want[k]; ok {
							if string(r.Value) != a.value {
								t.Fatalf("round %d: partition %d offset %d holds %q, %q was acknowledged", round, r.Partition, r.Offset, r.Value, a.value)
							}
							delete(want, k)
						}
					})
				}
			}
			checkAcked()
		}
		// Produce until killed.
		c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("crash"), kgo.AllowAutoTopicCreation(),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(0), kgo.RecordDeliveryTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					v := fmt.Sprintf("round %d producer %d record %d", round, g, i)
					res := c.ProduceSync(ctx, &kgo.Record{Value: []byte(v)})
					if r, err := res.First(); err == nil {
						mu.Lock()
						acked = append(acked, ack{r.Partition, r.Offset, v})
						mu.Unlock()
					}
				}
			}(g)
		}
		time.Sleep(time.Duration(700+round*300) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		cancel()
		c.Close() // fails what is still buffered: none of it was acknowledged
		wg.Wait()
		if len(acked) == 0 {
			t.Fatal("nothing was acknowledged before the kill")
		}
	}
	t.Logf("%d acknowledged records survived 3 kills", len(acked))
}
