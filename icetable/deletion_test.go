package icetable

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"strata/engine/segment"
	"strata/metadata"
	"strata/tiering"
	"strata/tiering/objstore"
)

// tableFault fails every write and delete under a table's folder while on,
// as a bucket whose metadata folder was made read-only.
type tableFault struct {
	objstore.Bucket
	on atomic.Bool
}

var errReadOnly = errors.New("the table's folder is read-only (injected)")

func (f *tableFault) hit(name string) bool {
	return f.on.Load() && strings.Contains(name, "/"+tableFolder+"/")
}

func (f *tableFault) Upload(ctx context.Context, name string, r io.Reader) error {
	if f.hit(name) {
		return errReadOnly
	}
	return f.Bucket.Upload(ctx, name, r)
}

func (f *tableFault) UploadIf(ctx context.Context, name string, r io.Reader, v objstore.Version) error {
	if f.hit(name) {
		return errReadOnly
	}
	return f.Bucket.UploadIf(ctx, name, r, v)
}

func (f *tableFault) Delete(ctx context.Context, name string) error {
	if f.hit(name) {
		return errReadOnly
	}
	return f.Bucket.Delete(ctx, name)
}

// A DeleteTopics whose table forget fails (the bucket refuses the table's
// writes) is answered, and the deletion waits for the bucket: retried
// until it lands, and the topic's name is taken till then, as Kafka's
// "marked for deletion", so a topic made again under it never finds the
// old topic's objects at its keys nor the old table's records.
func TestADeletionWaitsForTheBucket(t *testing.T) {
	ctx := context.Background()
	raw, dir := localBucket(t)
	fault := &tableFault{Bucket: raw}
	r := newRig(t, fault, dir, func(c *segment.Config) { c.DeleteRetryInterval = 50 * time.Millisecond })
	topics := metadata.NewSingle(r.engine, nil, func() metadata.Broker { return metadata.Broker{} })
	if err := topics.CreateTopic(ctx, "orders", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	produce(t, r.engine, "orders-0", 30, 0)
	r.run(t, map[string]uint64{})
	if len(parquetObjects(t, dir)) == 0 {
		t.Fatal("nothing tiered")
	}

	fault.on.Store(true)
	if err := topics.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopics with the table's folder read-only: %v; want it answered, the deletion pending", err)
	}
	err := topics.CreateTopic(ctx, "orders", 1, 1, nil)
	if !errors.Is(err, metadata.ErrTopicDeleting) {
		t.Fatalf("creating the topic again while its deletion waits for the bucket: %v; want %v", err, metadata.ErrTopicDeleting)
	}
	if got, _ := topics.Topics(ctx); len(got) != 0 {
		t.Fatalf("topics while the deletion is pending: %v; want none", got)
	}
	time.Sleep(200 * time.Millisecond) // a few retries, each failing
	if err := topics.CreateTopic(ctx, "orders", 1, 1, nil); !errors.Is(err, metadata.ErrTopicDeleting) {
		t.Fatalf("creating it again after failed retries: %v; want %v", err, metadata.ErrTopicDeleting)
	}

	fault.on.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := topics.CreateTopic(ctx, "orders", 1, 1, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, metadata.ErrTopicDeleting) || time.Now().After(deadline) {
			t.Fatalf("creating the topic again once the bucket takes writes: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The old topic's objects and table went before the name was free.
	if left := parquetObjects(t, dir); len(left) != 0 {
		t.Fatalf("the name is free and the deleted topic left %d objects: %v", len(left), left)
	}
	if _, err := r.tables.Describe(ctx, "orders"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("the name is free and the deleted topic's table: %v; want none", err)
	}
	produced := produce(t, r.engine, "orders-0", 30, 1000)
	tiered := map[string]uint64{}
	sum, err := r.job.Run(ctx)
	if err != nil || len(sum.Errors) > 0 {
		t.Fatalf("tiering the topic made again: %v %+v", err, sum.Errors)
	}
	for _, u := range append(sum.Uploaded, sum.Adopted...) {
		tiered[u.Shard] += u.Records
	}
	if tiered["orders-0"] == 0 {
		t.Fatal("the topic made again tiered nothing")
	}
	rows, _ := scan(t, r.tables, "orders", 0)
	sameRecords(t, "the topic made again", rows[0], produced[:tiered["orders-0"]])
	if _, err := tiering.ReadManifest(ctx, raw, "data/topic=orders/partition=0/_strata_manifest.json"); err != nil {
		t.Fatal(err)
	}
}
