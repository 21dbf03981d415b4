package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/bench"
	"strata/bench/load"
)

// A producer's throughput while hostile clients hold two thousand
// connections that announce 99 MiB frames and send nothing, and another
// sends decompression bombs as fast as it is answered, beside its
// throughput undisturbed in the same run (runs alternate, median of 3): the
// bounds must keep it within 20%.
func BenchmarkProduceUnderAttack(b *testing.B) {
	const partitions, total, size, runs, idle = 16, 100_000, 1024, 3, 2000
	ctx := context.Background()
	addr, _ := startServer(b, Config{FrameTimeout: 5 * time.Minute})
	c, err := kgo.NewClient(load.ClientOpts(addr)...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	_, port, _ := net.SplitHostPort(addr)
	produce := func(topic string) float64 {
		if err := load.CreateTopic(ctx, addr, topic, partitions, nil); err != nil {
			b.Fatal(err)
		}
		r, err := load.Produce(ctx, c, topic, total, size, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		return r.RecordsPerSec()
	}
	bomb := bombBatch(100 << 20) // past the 64 MiB a batch may inflate to; made once, so the attacker's own work is not measured
	attack := func() (stop func()) {
		var conns []net.Conn
		for i := 0; i < idle; i++ {
			// From two addresses: each may hold 1000 (kafka.max_connections_per_ip).
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+2*(i%2)))}}
			conn, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
			if err != nil {
				b.Fatal(err)
			}
			var hdr [8]byte
			binary.BigEndian.PutUint32(hdr[:], 99<<20) // a Produce frame of 99 MiB, never sent
			conn.Write(hdr[:])
			conns = append(conns, conn)
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // decompression bombs, one request after another
			defer wg.Done()
			bomber, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(5*time.Second))
			if err != nil {
				return
			}
			defer bomber.Close()
			req := produceRequest("bombed", bomb, bomb, bomb, bomb, bomb, bomb, bomb, bomb)
			for {
				select {
				case <-done:
					return
				default:
				}
				req.RequestWith(ctx, bomber)
			}
		}()
		return func() {
			close(done)
			wg.Wait()
			for _, conn := range conns {
				conn.Close()
			}
		}
	}
	if err := load.CreateTopic(ctx, addr, "bombed", 8, nil); err != nil {
		b.Fatal(err)
	}
	produce("warmup")
	var calm, attacked []float64
	for run := 0; run < runs; run++ {
		calm = append(calm, produce(fmt.Sprintf("calm-%d", run)))
		stop := attack()
		attacked = append(attacked, produce(fmt.Sprintf("attacked-%d", run)))
		stop()
	}
	report(b, bench.Figure{Name: fmt.Sprintf("kafka produce 1KiB x %d partitions beside %d stalled 99MiB frames and zstd bombs", partitions, idle),
		Value: bench.Median(attacked), Unit: "rec/s", Reference: "the same producer undisturbed, same run", ReferenceValue: bench.Median(calm),
		Target: ">= 0.80", Runs: runs})
}
