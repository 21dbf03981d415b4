package kafka

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/memory"
	"strata/engine/record"
)

func seedFrame(req kmsg.Request, version int16) []byte {
	req.SetVersion(version)
	f := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	f = binary.BigEndian.AppendUint16(f, uint16(version))
	f = binary.BigEndian.AppendUint32(f, 7)
	f = binary.BigEndian.AppendUint16(f, 3)
	f = append(f, "fuz"...)
	if req.IsFlexible() {
		f = append(f, 0)
	}
	return req.AppendTo(f)
}

// Whatever a client sends, the server answers or refuses it and keeps
// running: no request frame may crash it.
func FuzzHandleFrame(f *testing.F) {
	produce := kmsg.NewPtrProduceRequest()
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "t"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = encodeBatch(nil, []record.Record{{Offset: 0, Key: []byte("k"), Value: []byte("v")}})
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)
	produce.Acks = -1
	f.Add(seedFrame(produce, 9))
	f.Add(seedFrame(kmsg.NewPtrApiVersionsRequest(), 3))
	f.Add(seedFrame(kmsg.NewPtrMetadataRequest(), 12))
	fetch := kmsg.NewPtrFetchRequest()
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "t"
	ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
	fetch.Topics = append(fetch.Topics, ft)
	f.Add(seedFrame(fetch, 12))
	f.Add(seedFrame(kmsg.NewPtrListOffsetsRequest(), 7))
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = "g", "consumer", 10_000, 10_000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1}}}
	f.Add(seedFrame(join, 9))
	f.Add(seedFrame(join, 3))
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = "g", "m", 1
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: "m", MemberAssignment: []byte{1}}}
	f.Add(seedFrame(sync, 5))
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "g", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "t"
	ct.Partitions = append(ct.Partitions, kmsg.NewOffsetCommitRequestTopicPartition())
	commit.Topics = append(commit.Topics, ct)
	f.Add(seedFrame(commit, 8))
	fetchOffsets := kmsg.NewPtrOffsetFetchRequest()
	fetchOffsets.Group = "g"
	f.Add(seedFrame(fetchOffsets, 7))
	f.Add(seedFrame(kmsg.NewPtrFindCoordinatorRequest(), 4))
	// Group waits are cut short: a fuzzed JoinGroup must not stall the run.
	s := New(memory.New(1000), Config{AutoCreateTopics: true, Logger: quiet, MaxFetchWait: time.Millisecond,
		GroupInitialWait: time.Millisecond, GroupMaxRebalanceWait: time.Millisecond})
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 8 {
			return
		}
		s.handleFrame(context.Background(), frame, "127.0.0.1:1", nil)
	})
}

// Record batches from the wire: decoded or refused, never a panic, and a
// batch that decodes re-encodes to records with the same content.
func FuzzDecodeBatches(f *testing.F) {
	f.Add(encodeBatch(nil, []record.Record{{Offset: 5, Timestamp: 9, Key: []byte("k"), Value: []byte("v"),
		Headers: []record.Header{{Key: "h", Value: nil}}}}))
	f.Add(encodeBatch(nil, []record.Record{
		{Offset: 100, Timestamp: 1 << 40, Key: nil, Value: bytes.Repeat([]byte("v"), 300)},
		{Offset: 101, Timestamp: 5, Key: []byte{}, Value: nil, Headers: []record.Header{{Key: "", Value: []byte{}}, {Key: "trace", Value: []byte("x")}}},
	}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		recs, _, err := decodeBatches(raw, ptr(int64(1<<30)))
		if err != nil || len(recs) == 0 {
			return
		}
		again, _, err := decodeBatches(encodeBatch(nil, recs), ptr(int64(1<<30)))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-encoded batch: %v, %d records of %d", err, len(again), len(recs))
		}
		for i := range recs {
			a, b := recs[i], again[i]
			if a.Timestamp != b.Timestamp || !sameBytes(a.Key, b.Key) || !sameBytes(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
				t.Fatalf("record %d re-encoded as %+v, was %+v", i, b, a)
			}
			for h := range a.Headers {
				if a.Headers[h].Key != b.Headers[h].Key || !sameBytes(a.Headers[h].Value, b.Headers[h].Value) {
					t.Fatalf("record %d header %d re-encoded as %+v, was %+v", i, h, b.Headers[h], a.Headers[h])
				}
			}
		}
	})
}

// sameBytes tells null from empty, as the wire does.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// chunkReader hands out its bytes at most n at a time, as a socket does.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// A frame body read as it arrives, in any chunks, of any size up to 2 MiB
// and with as many bytes as the client sent: the frame is exactly the
// body, or an error when the body is short; what the budget granted never
// passes the frame, and is the whole frame once it is read.
func FuzzReadFrame(f *testing.F) {
	f.Add(uint32(100), uint32(100), uint16(7), false, []byte("abc"))
	f.Add(uint32(300<<10), uint32(300<<10), uint16(4096), true, []byte{1, 2, 3, 4, 5})
	f.Add(uint32(1<<20+3), uint32(700<<10), uint16(65535), false, []byte{9})
	f.Fuzz(func(t *testing.T, size, sent uint32, chunk uint16, overBudget bool, pattern []byte) {
		size, sent = 1+size%(2<<20), sent%(2<<20+1)
		if len(pattern) == 0 {
			pattern = []byte{0}
		}
		body := bytes.Repeat(pattern, int(sent)/len(pattern)+1)[:sent]
		r := bufio.NewReaderSize(&chunkReader{body, 1 + int(chunk)}, 64<<10)
		takes := 0
		frame, held, err := readFrame(r, int(size), func(n, held, rest int) (int, error) {
			if n <= 0 || held < 0 || n > rest {
				t.Fatalf("take(%d, %d, %d)", n, held, rest)
			}
			takes++
			if overBudget && takes == 2 { // let over the budget: the rest at once
				return rest, nil
			}
			return n, nil
		})
		if held < 0 || held > int(size) {
			t.Fatalf("granted %d for a frame of %d", held, size)
		}
		if sent < size {
			if err == nil {
				t.Fatalf("a frame of %d read from %d bytes", size, sent)
			}
			return
		}
		if err != nil || !bytes.Equal(frame, body[:size]) || held != int(size) {
			t.Fatalf("frame of %d from %d bytes: %v, %d bytes read (equal %t), %d granted", size, sent, err, len(frame), bytes.Equal(frame, body[:size]), held)
		}
	})
}
