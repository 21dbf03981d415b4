package icetable

import (
	"context"
	"errors"

	"github.com/apache/iceberg-go/table"

	"strata/tiering/objstore"
)

// ErrNoTable says a topic has no table (yet): nothing tiered, or
// iceberg.enabled off when it was. Current and Describe answer it.
var ErrNoTable = errNoTable

// Current reads the topic's table as its pointer (version-hint.text) names
// it: the metadata readers are handed and its location, the URI of the
// metadata file. It reads the bucket alone, so every node sharing the bucket
// answers the same, and what it returns is committed: the pointer swap is
// the commit.
func (t *Tables) Current(ctx context.Context, topic string) (table.Metadata, string, error) {
	tbl, _, err := t.load(ctx, topic)
	if err != nil {
		return nil, "", err
	}
	return tbl.Metadata(), tbl.MetadataLocation(), nil
}

// Exists says whether the topic has a table: whether its pointer is there.
func (t *Tables) Exists(ctx context.Context, topic string) (bool, error) {
	_, err := t.Bucket.Stat(ctx, t.hintKey(topic))
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
