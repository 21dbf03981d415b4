package tiering

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path"
	"slices"
	"strings"
	"testing"

	"strata/tiering/objstore"
	"strata/tiering/objstore/local"
)

// A deleted topic's last partition takes its Iceberg table's folder with
// it. Killed after any one delete, the bucket never holds a pointer naming
// a metadata file that is gone (the workload found a topic's name taken for
// good so), and what is left of a Hadoop-style table is its newest whole
// version: the pointer goes first, then the metadata files newest first.
func TestATopicsTableFolderGoesPointerFirst(t *testing.T) {
	ctx := context.Background()
	b, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	meta := "topic=orders/_iceberg/metadata/"
	for _, name := range []string{"00001-a.metadata.json", "00002-b.metadata.json", "00010-c.metadata.json",
		"v9.metadata.json", "v10.metadata.json", "snap-1-0-x.avro", "x-m0.avro", "version-hint.text"} {
		if err := b.Upload(ctx, meta+name, strings.NewReader("{}")); err != nil {
			t.Fatal(err)
		}
	}
	rec := &deleteOrder{Bucket: b}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := forgetTopicFolder(ctx, rec, "topic=orders", quiet); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range rec.deleted {
		got = append(got, path.Base(k))
	}
	want := []string{"version-hint.text", "00010-c.metadata.json", "v10.metadata.json", "v9.metadata.json", "00002-b.metadata.json", "00001-a.metadata.json"}
	if len(got) != 8 || !slices.Equal(got[:6], want) {
		t.Fatalf("deleted in the order %v; want %v, then the manifests", got, want)
	}
	if err := b.List(ctx, "topic=orders/", func(a objstore.Attrs) error { return errors.New("left: " + a.Name) }); err != nil {
		t.Fatal(err)
	}
}

type deleteOrder struct {
	objstore.Bucket
	deleted []string
}

func (d *deleteOrder) Delete(ctx context.Context, name string) error {
	d.deleted = append(d.deleted, name)
	return d.Bucket.Delete(ctx, name)
}
