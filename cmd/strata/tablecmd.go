package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/api/admin"
	"strata/engine/store"
	"strata/icetable"
	"strata/metadata"
	"strata/tiering"
)

// tableAPI serves the topics' Iceberg tables to operators: GET /v1/tables
// and GET /v1/tables/{topic} (docs/iceberg.md, "Operators"), with each
// partition's lag behind its log.
type tableAPI struct {
	tables *icetable.Tables
	store  store.Store
	meta   metadata.Cluster // the topics: a table of a topic deleted since is no one's
}

func (a tableAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/tables", func(w http.ResponseWriter, r *http.Request) {
		topics, err := a.meta.Topics(r.Context())
		if err != nil {
			writeTableError(w, err)
			return
		}
		out := []icetable.TableView{}
		for _, topic := range slices.Sorted(maps.Keys(topics)) {
			v, err := a.describe(r.Context(), topic)
			switch {
			case errors.Is(err, icetable.ErrNoTable):
				continue
			case err != nil:
				// One unreadable table hides none of the others.
				v = icetable.TableView{Topic: topic, Error: err.Error(), Partitions: []icetable.PartitionView{}}
			}
			out = append(out, v)
		}
		admin.WriteJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/tables/{topic}", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.describe(r.Context(), r.PathValue("topic"))
		if err != nil {
			writeTableError(w, err)
			return
		}
		admin.WriteJSON(w, http.StatusOK, v)
	})
}

// describe is the table with each partition's lag: the records between
// what the table holds and the high watermark, and the age of the first of
// them (its timestamp), when this node has the partition's shard.
func (a tableAPI) describe(ctx context.Context, topic string) (icetable.TableView, error) {
	topics, err := a.meta.Topics(ctx)
	if err != nil {
		return icetable.TableView{}, err
	}
	if _, ok := topics[topic]; !ok {
		return icetable.TableView{}, fmt.Errorf("no topic %s: %w", topic, icetable.ErrNoTable)
	}
	v, err := a.tables.Describe(ctx, topic)
	if err != nil {
		return v, err
	}
	for i, p := range v.Partitions {
		records, seconds, ok := a.lag(ctx, topic, p)
		if ok {
			v.Partitions[i].LagRecords, v.Partitions[i].LagSeconds = records, seconds
		}
	}
	return v, nil
}

func (a tableAPI) lag(ctx context.Context, topic string, p icetable.PartitionView) (int64, float64, bool) {
	shard := store.TopicPartition{Topic: topic, Partition: p.Partition}.Shard()
	_, high, err := a.store.Watermarks(ctx, shard)
	if err != nil {
		return 0, 0, false
	}
	next := p.Last + 1 // also when empty: First is Last + 1
	if high <= next {
		return 0, 0, true
	}
	seconds := 0.0
	if recs, err := a.store.Read(ctx, shard, next, store.Budget{MaxRecords: 1, MaxBytes: 1 << 20}); err == nil && len(recs) > 0 {
		seconds = max(0, time.Since(time.UnixMilli(recs[0].Timestamp)).Seconds())
	}
	return int64(high - next), seconds, true
}

func writeTableError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, icetable.ErrNoTable) {
		status = http.StatusNotFound
	}
	admin.WriteJSON(w, status, map[string]string{"error": err.Error()})
}

// tableLag is strata_iceberg_table_lag_records{topic,partition}: from the
// offsets each table held when this node last committed or read it (no
// bucket read at a scrape) to the partition's high watermark.
type tableLag struct {
	tables *icetable.Tables
	store  store.Store
	desc   *prometheus.Desc
}

func newTableLag(tables *icetable.Tables, s store.Store) *tableLag {
	return &tableLag{tables: tables, store: s, desc: prometheus.NewDesc("strata_iceberg_table_lag_records",
		"Records between what a topic's Iceberg table holds of a partition (as of this node's last commit or read of it) and the partition's high watermark",
		[]string{"topic", "partition"}, nil)}
}

func (c *tableLag) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *tableLag) Collect(ch chan<- prometheus.Metric) {
	ctx := context.Background()
	for topic, parts := range c.tables.LastCommitted() {
		for p, r := range parts {
			_, high, err := c.store.Watermarks(ctx, store.TopicPartition{Topic: topic, Partition: p}.Shard())
			if err != nil {
				continue // not this node's partition
			}
			lag := 0.0
			if next := r.Last + 1; high > next {
				lag = float64(high - next)
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, lag, topic, fmt.Sprint(p))
		}
	}
}

// tableCmd is `strata table describe TOPIC` and `strata table retype
// TOPIC`, through the running service's admin API.
func tableCmd(args []string, out io.Writer) error {
	const usage = "usage: strata table describe|retype TOPIC [--admin-addr HOST:PORT]"
	if len(args) < 2 || args[0] != "describe" && args[0] != "retype" || strings.HasPrefix(args[1], "-") {
		return errors.New(usage)
	}
	topic := args[1]
	fs := flag.NewFlagSet("table "+args[0], flag.ContinueOnError)
	addr := fs.String("admin-addr", "127.0.0.1:9644", "the running service's admin address")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("table %s: unexpected argument %q\n%s", args[0], fs.Arg(0), usage)
	}
	if args[0] == "retype" {
		return retypeCmd(*addr, topic, out)
	}
	var v icetable.TableView
	if err := adminCall(*addr, http.MethodGet, "/v1/tables/"+topic, nil, &v); err != nil {
		return err
	}
	printTable(out, v)
	return nil
}

// retypeCmd asks the service to rewrite the topic's cold objects with
// the typed columns its configs ask for (docs/typed.md, "Backfill"),
// printing each object as it is done.
func retypeCmd(addr, topic string, out io.Writer) error {
	resp, err := adminRequest(addr, http.MethodPost, "/v1/tiering/retype?topic="+url.QueryEscape(topic), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var line struct {
			tiering.RetypeProgress
			Done    *tiering.RetypeSummary `json:"done"`
			Error   string                 `json:"error"`
			Stopped tiering.RetypeSummary  `json:"stopped_after"`
		}
		if err := dec.Decode(&line); err != nil {
			return fmt.Errorf("retype %s: the answer ended before it was done: %w", topic, err)
		}
		switch {
		case line.Error != "":
			return fmt.Errorf("retype %s: %s (%d objects rewritten before)", topic, line.Error, line.Stopped.Rewritten)
		case line.Done != nil:
			fmt.Fprintf(out, "retyped topic %s: %d objects rewritten (%d bytes), %d had the typed columns already\n",
				topic, line.Done.Rewritten, line.Done.Bytes, line.Done.Skipped)
			return nil
		case line.Skipped:
			fmt.Fprintf(out, "%s: object %d of %d has the typed columns: %s\n", line.Shard, line.Object, line.Of, line.Key)
		default:
			fmt.Fprintf(out, "%s: object %d of %d rewritten: %s (%d bytes)\n", line.Shard, line.Object, line.Of, line.Key, line.Bytes)
		}
	}
}

func printTable(out io.Writer, v icetable.TableView) {
	fmt.Fprintf(out, "table %s\n  location  %s\n  metadata  %s\n", v.Topic, v.Location, v.Metadata)
	if v.SnapshotID == 0 {
		fmt.Fprintln(out, "  snapshot  none yet")
		return
	}
	fmt.Fprintf(out, "  snapshot  %d (%s, %s; %d kept)\n  files     %d data, %d delete; %d bytes, %d records (%d more hidden by the deletes)\n\npartitions:\n",
		v.SnapshotID, v.SnapshotTime.Format(time.RFC3339), v.Operation, v.Snapshots, v.DataFiles, v.DeleteFiles, v.Bytes, v.Records, v.HiddenRecords)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PARTITION\tFIRST\tLAST\tLAG_RECORDS\tLAG_SECONDS")
	for _, p := range v.Partitions {
		last, lag, secs := fmt.Sprint(p.Last), "-", "-"
		if p.Empty {
			last = "(empty)"
		}
		if p.LagRecords >= 0 {
			lag, secs = fmt.Sprint(p.LagRecords), fmt.Sprintf("%.1f", p.LagSeconds)
		}
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\n", p.Partition, p.First, last, lag, secs)
	}
	tw.Flush()
}
