package icetable

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	if t.external != nil {
		return t.external.cat.CheckTableExists(ctx, t.external.ident(topic))
	}
	if t.Hadoop { // the hint may be missing
		_, _, err := t.load(ctx, topic)
		switch {
		case errors.Is(err, errNoTable):
			return false, nil
		case errors.Is(err, errBadMetadata):
			return true, nil // there, if unreadable: loading it says why
		}
		return err == nil, err
	}
	_, err := t.Bucket.Stat(ctx, t.hintKey(topic))
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Referenced is the bucket's objects that a kept snapshot of a topic's
// table names as data files. tiering's retention and orphan sweep leave
// those in the bucket (only the catalog and the shard's manifest let go of
// them), so a reader of a kept snapshot, or one that loaded the table just
// before a delete commit, finds every file; the table's expiry deletes
// each once no kept snapshot names it (iceberg.file_delete_delay after a
// removal, retentionFloor).
func (t *Tables) Referenced(ctx context.Context, topics []string) (map[string]bool, error) {
	out := map[string]bool{}
	base := strings.TrimSuffix(t.Location, "/") + "/"
	for _, topic := range topics {
		tbl, _, err := t.load(ctx, topic)
		if errors.Is(err, errNoTable) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, s := range tbl.Metadata().Snapshots() {
			tasks, err := tbl.Scan(table.WithSnapshotID(s.SnapshotID)).PlanFiles(ctx)
			if err != nil {
				return nil, fmt.Errorf("the files of snapshot %d of %s: %w", s.SnapshotID, tbl.MetadataLocation(), err)
			}
			for _, task := range tasks {
				if name, ok := strings.CutPrefix(task.File.FilePath(), base); ok {
					out[name] = true
				}
			}
		}
	}
	return out, nil
}
