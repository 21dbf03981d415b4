package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/catalog"
	"strata/catalog/pebblecat"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/parquet"
	"strata/tiering"
	"strata/tiering/objstore"
)

// catalogCmd: "ls" prints shards and segments; "rebuild" restores a lost
// catalog from the bucket's manifests. Both open the catalog directly, so
// the service must be stopped (Pebble's lock says so if it is not).
func catalogCmd(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: strata catalog ls|rebuild|ddl [--config FILE] [--set key=value ...]")
	}
	if args[0] == "ddl" {
		fs := flag.NewFlagSet("catalog ddl", flag.ContinueOnError)
		topic := fs.String("topic", "", "the topic to make a table of")
		location := fs.String("location", "", "URI of the topic's folder, e.g. s3a://bucket/prefix/topic=orders")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *topic == "" || *location == "" {
			return errors.New("usage: strata catalog ddl --topic T --location URI")
		}
		fmt.Fprintln(out, parquet.HiveDDL(*topic, *location)+";")
		return nil
	}
	cfg, err := configFlags("catalog "+args[0], args[1:])
	if err != nil {
		return err
	}
	if cfg.Cluster.Enabled() {
		// Its catalog is in etcd, beside other nodes' parts of the same
		// partitions, whose objects share the bucket: a rebuild from the
		// bucket would claim them, and a local catalog would bar the folder
		// from the cluster (docs/cluster.md).
		return fmt.Errorf("strata catalog %s: a cluster node's catalog is in etcd; use GET /v1/cluster and /v1/shards on the running node", args[0])
	}
	dir := filepath.Join(cfg.DataDir, "catalog")
	switch args[0] {
	case "ls":
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("no catalog at %s: %w", dir, err)
		}
		cat, err := pebblecat.Open(dir)
		if err != nil {
			return fmt.Errorf("%w (is strata serve running on this data dir? stop it, or use the admin API)", err)
		}
		defer cat.Close()
		return listCatalog(cat, out)
	case "rebuild":
		cold, err := openColdTier(cfg.Cold, prometheus.NewRegistry())
		if err != nil {
			return err
		}
		defer cold.Close()
		cat, err := pebblecat.Open(dir)
		if err != nil {
			return fmt.Errorf("%w (is strata serve running on this data dir? stop it first)", err)
		}
		defer cat.Close()
		log := newLogger(cfg.Log, os.Stderr)
		e, err := segment.Open(segment.Config{Dir: cfg.DataDir, Logger: log, Events: tiering.Listen(cat, cold, cfg.Tiering.Prefix, log)})
		if err != nil {
			return err
		}
		defer e.Close()
		ctx := context.Background()
		sum, err := tiering.Rebuild(ctx, cold, cfg.Tiering.Prefix, cat, e, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "restored %d shards with %d tiered segments; %d shards were already in the catalog\n",
			len(sum.Shards), sum.Segments, len(sum.Skipped))
		if len(sum.Empty) > 0 {
			fmt.Fprintf(out, "%d shards had nothing left in the bucket (retention took every object): %s\n", len(sum.Empty), strings.Join(sum.Empty, ", "))
		}
		return rebuildTables(ctx, cfg, cold, append(sum.Shards, sum.Skipped...), log, out)
	}
	return fmt.Errorf("strata catalog: unknown command %q (want ls or rebuild)", args[0])
}

// rebuildTables commits every tiered shard's objects to its topic's
// Iceberg table, with iceberg.enabled: a table whose pointer was lost (a
// SQL catalog's database, a damaged version-hint.text) is made again from
// the shards' manifests, holding every tiered object once; a table that is
// there gets what it lacks, and nothing twice.
func rebuildTables(ctx context.Context, cfg *Config, cold objstore.Bucket, shards []string, log *slog.Logger, out io.Writer) error {
	tables, err := icebergTables(ctx, cfg, cold, log)
	if err != nil || tables == nil {
		return err
	}
	defer tables.Close()
	all := map[string]uint64{}
	topics := map[string]bool{}
	for _, s := range shards {
		if tp, ok := store.ParseShard(s); ok {
			all[s], topics[tp.Topic] = 0, true
		}
	}
	if err := tables.CommitTables(ctx, all); err != nil {
		return fmt.Errorf("rebuilding the Iceberg tables: %w", err)
	}
	fmt.Fprintf(out, "committed the tiered objects of %d topics to their Iceberg tables\n", len(topics))
	return nil
}

func listCatalog(cat catalog.Catalog, out io.Writer) error {
	shards, err := cat.Shards()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSEGMENT\tSTATE\tOFFSETS\tRECORDS\tBYTES\tOBJECT")
	for _, sh := range shards {
		segs, err := cat.Segments(sh.Name)
		if err != nil {
			return err
		}
		for _, s := range segs {
			offsets := fmt.Sprintf("%d-%d", s.StartOffset, s.EndOffset)
			if s.State == catalog.Active {
				offsets = fmt.Sprintf("%d-", s.StartOffset)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\n", sh.Name, s.No, s.State, offsets, s.Records, s.Size, s.ObjectKey)
		}
	}
	return tw.Flush()
}

// tierCmd asks a running service to do one tiering pass now.
func tierCmd(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tier run", flag.ContinueOnError)
	addr := fs.String("admin-addr", "127.0.0.1:9644", "the running service's admin address")
	if len(args) == 0 || args[0] != "run" {
		return errors.New("usage: strata tier run [--admin-addr HOST:PORT]")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	var sum tiering.RunSummary
	if err := adminCall(*addr, http.MethodPost, "/v1/tiering/run", nil, &sum); err != nil {
		return fmt.Errorf("tiering run: %w", err)
	}
	fmt.Fprintf(out, "uploaded %d segments (%d bytes), dropped %d local copies, deleted %d orphans in %s\n",
		len(sum.Uploaded), sum.Bytes, sum.DroppedLocal, sum.OrphansDeleted, sum.Finished.Sub(sum.Started).Round(time.Millisecond))
	for _, e := range sum.Errors {
		fmt.Fprintln(out, "error:", e)
	}
	if len(sum.Errors) > 0 {
		return fmt.Errorf("%d errors", len(sum.Errors))
	}
	return nil
}
