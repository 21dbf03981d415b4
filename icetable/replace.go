package icetable

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"strata/engine/store"
	"strata/tiering"
)

// Replace swaps, in the shard's topic's table, the data file of each
// object named in swaps for the one its entry names: a retype rewrote the
// object, the same records with more columns (tiering.Job.Retype), or a
// merge wrote several objects' records as one (tiering.Job.Merge: the
// new file goes in once for all of them). One
// commit does them all, its snapshot's summary keeping the offsets the
// table holds, so the next commit plans as before; the rows below the
// partition's log start, which a position delete hid in an old file, are
// hidden in the new one too. An object the table does not hold (it never
// took it, or has the new one already) is passed over.
func (t *Tables) Replace(ctx context.Context, shard string, swaps map[string]tiering.ManifestEntry) error {
	tp, ok := store.ParseShard(shard)
	if !ok {
		return nil
	}
	if t.Lock != nil {
		release, err := t.Lock(ctx, tp.Topic)
		if err != nil {
			return err
		}
		defer release()
	}
	for attempt := 1; ; attempt++ {
		err := t.replace(ctx, tp, swaps)
		if !errors.Is(err, table.ErrCommitFailed) || attempt == commitAttempts {
			return err
		}
		t.Metrics.conflict()
	}
}

func (t *Tables) replace(ctx context.Context, tp store.TopicPartition, swaps map[string]tiering.ManifestEntry) error {
	tbl, _, err := t.load(ctx, tp.Topic)
	if errors.Is(err, errNoTable) {
		return nil
	}
	if err != nil {
		return err
	}
	cur := tbl.CurrentSnapshot()
	if cur == nil || cur.Summary == nil {
		return nil
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return fmt.Errorf("the files of %s: %w", tbl.MetadataLocation(), err)
	}
	var olds []iceberg.DataFile
	var news []File
	below := uint64(0) // the first offset of the new files
	for _, task := range tasks {
		for old, e := range swaps {
			if task.File.FilePath() == t.uri(old) {
				olds = append(olds, task.File)
				// A merge replaces several objects with one.
				if !slices.ContainsFunc(news, func(f File) bool { return f.Key == e.Key }) {
					news = append(news, File{Partition: tp.Partition, ManifestEntry: e})
				}
				if len(news) == 1 || e.StartOffset < below {
					below = e.StartOffset
				}
			}
		}
	}
	if len(olds) == 0 {
		return nil
	}
	committed, err := Committed(cur.Summary.Properties)
	if err != nil {
		return fmt.Errorf("the current snapshot %d of %s: %w", cur.SnapshotID, tbl.MetadataLocation(), err)
	}
	summary := summary(committed, nil)
	added, err := t.dataFiles(tbl, news)
	if err != nil {
		return err
	}
	txn := tbl.NewTransaction()
	if err := txn.ReplaceDataFilesWithDataFiles(ctx, olds, added, summary); err != nil {
		return fmt.Errorf("replacing %d retyped or merged objects: %w", len(olds), err)
	}
	if r, ok := committed[tp.Partition]; ok && r.First > below {
		step := Step{Kind: StepHide, Partition: tp.Partition, Below: r.First}
		if err := txn.Delete(ctx, step.deleteFilter(), summary); err != nil {
			return fmt.Errorf("hiding the rows below offset %d in the retyped or merged objects: %w", r.First, err)
		}
	}
	if _, err := txn.Commit(ctx); err != nil {
		return err
	}
	t.log().Info("retyped or merged objects replaced in the topic's table", "topic", tp.Topic, "partition", tp.Partition, "files", len(olds))
	return nil
}
