package icetable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go/table"

	"strata/tiering/objstore"
)

// Hadoop-style tables (iceberg.catalog: hadoop), as Iceberg's
// HadoopTableOperations reads them: Spark's HadoopCatalog and path-based
// tables, DuckDB's iceberg_scan of the folder. The metadata files are
// named v{N}.metadata.json and the commit is the write of the next one,
// made only if it is absent (on HDFS, a rename under the object store's
// lock): of two commits based on version N one makes v{N+1}, the other
// fails cleanly and plans again. version-hint.text then says N+1, but only
// as a hint: a reader (this one as Iceberg's) looks past it for higher
// versions, so a commit that died after its metadata file and before the
// hint has landed, and one that wrote its hint late does no harm.
//
//	metadata/v1.metadata.json     the table as created
//	metadata/v2.metadata.json     one per commit
//	metadata/version-hint.text    "2"

var hadoopName = regexp.MustCompile(`^v([0-9]+)\.metadata\.json$`)

func hadoopStem(version int) string { return "v" + strconv.Itoa(version) }

// hadoopCurrent is the stem of the topic's current metadata file, from the
// hint (the hint's text; "" if there is none): the highest v{N} from the
// hint's version on, or from the folder's listing without a usable hint.
// A hint naming a bucket pointer's file ({version}-{uuid}: the table made
// before iceberg.catalog said hadoop) is current unless a v{N} above its
// version exists, or the file does not.
func (t *Tables) hadoopCurrent(ctx context.Context, topic, hint string) (string, error) {
	dir := t.Dir(topic) + "/metadata/"
	exists := func(stem string) (bool, error) {
		_, err := t.Bucket.Stat(ctx, dir+stem+".metadata.json")
		if errors.Is(err, objstore.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	stem, version := "", 0
	if n, err := strconv.Atoi(hint); err == nil && n > 0 {
		ok, err := exists(hadoopStem(n))
		if err != nil {
			return "", err
		}
		if ok {
			stem, version = hadoopStem(n), n
		}
	} else if v, err := metadataVersion(hint); err == nil {
		ok, err := exists(hint)
		if err != nil {
			return "", err
		}
		if ok {
			stem, version = hint, v
		}
	}
	if stem == "" { // no hint, or one naming a file that expired
		err := t.Bucket.List(ctx, dir, func(a objstore.Attrs) error {
			if m := hadoopName.FindStringSubmatch(strings.TrimPrefix(a.Name, dir)); m != nil {
				if n, _ := strconv.Atoi(m[1]); n > version {
					stem, version = hadoopStem(n), n
				}
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("listing %s: %w", dir, err)
		}
		if stem == "" {
			return "", errNoTable
		}
	}
	for {
		ok, err := exists(hadoopStem(version + 1))
		if err != nil {
			return "", err
		}
		if !ok {
			return stem, nil
		}
		version++
		stem = hadoopStem(version)
	}
}

// hadoopCommit writes meta as version's metadata file if no commit made
// that version first, then the hint.
func (t *Tables) hadoopCommit(ctx context.Context, topic string, version int, meta table.Metadata) (stem string, err error) {
	raw, err := json.Marshal(meta)
	if err != nil {
		return "", err
	}
	stem = hadoopStem(version)
	name := t.Dir(topic) + "/metadata/" + stem + ".metadata.json"
	err = t.Bucket.UploadIf(ctx, name, bytes.NewReader(raw), objstore.Absent)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		return "", fmt.Errorf("%w: another commit made version %d first: %w", table.ErrCommitFailed, version, err)
	}
	if err != nil {
		return "", fmt.Errorf("writing %s (the commit may or may not have landed): %w", name, err)
	}
	if err := t.Bucket.Upload(ctx, t.hintKey(topic), strings.NewReader(strconv.Itoa(version))); err != nil {
		// Landed all the same: readers look past the hint.
		t.log().Warn("the table's version-hint.text not updated", "topic", topic, "version", version, "err", err)
	}
	return stem, nil
}
