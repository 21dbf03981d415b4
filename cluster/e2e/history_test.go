package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// history records every produce a test makes (acknowledged at an offset,
// or failed: stored or not, nobody knows) and every record it reads back,
// and checks what a user relies on: nothing acknowledged lost, nothing
// stored twice, no two records at one offset. Values are unique per test,
// so a value read twice is a record stored twice.
type history struct {
	mu     sync.Mutex
	acked  map[string]at    // value: where its acknowledgement put it
	ackAt  []time.Time      // when each acknowledgement arrived, in order
	failed map[string]error // value: the error its producer got
	read   []readRec
}

type at struct {
	partition int32
	offset    int64
}

type readRec struct {
	at
	value string
}

func newHistory() *history {
	return &history{acked: map[string]at{}, failed: map[string]error{}}
}

// produced records the outcome of one produce, as a franz-go promise
// reports it.
func (h *history) produced(r *kgo.Record, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.failed[string(r.Value)] = err
		return
	}
	h.acked[string(r.Value)] = at{r.Partition, r.Offset}
	h.ackAt = append(h.ackAt, time.Now())
}

// ack records an acknowledgement reported by another client (the Java one).
func (h *history) ack(value string, partition int32, offset int64) {
	h.produced(&kgo.Record{Value: []byte(value), Partition: partition, Offset: offset}, nil)
}

func (h *history) readBack(value string, partition int32, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.read = append(h.read, readRec{at{partition, offset}, value})
}

// acks counts the acknowledgements that arrived in [from, to).
func (h *history) acks(from, to time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, t := range h.ackAt {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

func (h *history) numAcked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acked)
}

// check fails t for every broken promise and returns how many records were
// acknowledged.
func (h *history) check(t *testing.T) int {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var problems []string
	bad := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	seenValue := map[string]at{}
	seenOffset := map[at]string{}
	for _, r := range h.read {
		if prev, ok := seenOffset[r.at]; ok && prev != r.value {
			bad("two records at partition %d offset %d: %q and %q", r.partition, r.offset, prev, r.value)
		}
		seenOffset[r.at] = r.value
		if prev, ok := seenValue[r.value]; ok && prev != r.at {
			bad("%q stored twice: partition %d offset %d and partition %d offset %d", r.value, prev.partition, prev.offset, r.partition, r.offset)
		}
		seenValue[r.value] = r.at
		_, wasAcked := h.acked[r.value]
		if _, wasFailed := h.failed[r.value]; !wasAcked && !wasFailed {
			bad("%q read at partition %d offset %d was never produced", r.value, r.partition, r.offset)
		}
	}
	lost := 0
	for v, a := range h.acked {
		got, ok := seenValue[v]
		switch {
		case !ok:
			lost++
			bad("%q acknowledged at partition %d offset %d is lost", v, a.partition, a.offset)
		case got != a:
			bad("%q acknowledged at partition %d offset %d is read at partition %d offset %d", v, a.partition, a.offset, got.partition, got.offset)
		}
	}
	if len(h.acked) == 0 {
		bad("nothing was acknowledged: the test proves nothing")
	}
	if len(problems) > 0 {
		t.Errorf("history of %d acknowledged, %d failed, %d read records (%d acknowledged lost):\n  %s",
			len(h.acked), len(h.failed), len(h.read), lost, strings.Join(problems, "\n  "))
	}
	return len(h.acked)
}

// failures summarizes the produce errors by message, for the log.
func (h *history) failures() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := map[string]int{}
	for _, err := range h.failed {
		n[err.Error()]++
	}
	var out []string
	for msg, c := range n {
		out = append(out, fmt.Sprintf("%d× %s", c, msg))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// readAll reads every partition of topic from the start up to its end
// offsets, bootstrapping from node `via`, into h.
func (c *cluster) readAll(h *history, via int32, topic string) {
	c.t.Helper()
	cl := c.client(via)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		c.t.Fatalf("end offsets of %s through node %d: %v", topic, via, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range want {
		offsets[topic][p] = kgo.NewOffset().AtStart()
	}
	if len(want) == 0 {
		return
	}
	rd := c.client(via, kgo.ConsumePartitions(offsets))
	for len(want) > 0 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			c.t.Fatalf("reading %s through node %d: partitions %v not read to their ends", topic, via, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			h.readBack(string(r.Value), r.Partition, r.Offset)
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
}
