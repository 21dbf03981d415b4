package kafka

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/catalog/offsets"
	"strata/engine/segment"
)

// A deleted topic whose objects cannot leave the bucket yet (its deletion
// listener fails) is no topic to a client: Metadata by name, auto-creation
// allowed, answers UNKNOWN_TOPIC_OR_PARTITION, which producers retry, not
// a partition that refuses every produce (an outside tester's librdkafka
// producer timed out so); CreateTopics says it is marked for deletion.
// Once the bucket answers, the name is free again.
func TestATopicBeingDeletedIsNoTopic(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	dir := t.TempDir()
	e, err := segment.Open(segment.Config{Dir: dir + "/data", Workers: 2, Logger: quiet, DeleteRetryInterval: 50 * time.Millisecond,
		Events: segment.EventListener{ShardDeleted: func(context.Context, string, time.Time) error {
			if failing.Load() {
				return errors.New("the bucket refuses")
			}
			return nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	committed, err := offsets.Open(dir + "/groups")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { committed.Close() })
	srv := New(e, Config{Logger: quiet, Offsets: committed, AutoCreateTopics: true, DefaultPartitions: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := client(t, ln.Addr().String())
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "gone"); err != nil {
		t.Fatal(err)
	}
	if resp, err := adm.DeleteTopics(ctx, "gone"); err != nil || resp.Error() != nil {
		t.Fatalf("DeleteTopics: %v %v", err, resp.Error())
	}

	meta := func() int16 {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("gone")
		req.Topics, req.AllowAutoTopicCreation = append(req.Topics, rt), true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 {
			t.Fatalf("Metadata: %v %+v", err, resp)
		}
		if code := resp.Topics[0].ErrorCode; code != 0 || len(resp.Topics[0].Partitions) == 0 {
			return code
		}
		return 0
	}
	if code := meta(); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("Metadata of a topic being deleted: %v, want UNKNOWN_TOPIC_OR_PARTITION", kerr.ErrorForCode(code))
	}
	res, err := adm.CreateTopic(ctx, 1, 1, nil, "gone")
	if !errors.Is(res.Err, kerr.TopicAlreadyExists) || res.ErrMessage == "" {
		t.Fatalf("CreateTopics of a topic being deleted: %v %v %q, want TOPIC_ALREADY_EXISTS saying why", err, res.Err, res.ErrMessage)
	}

	failing.Store(false)
	deadline := time.Now().Add(30 * time.Second)
	for meta() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the name never came free once the bucket answered")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
