// Package admin is strata's operator HTTP API: health, metrics, shards and
// their segments, records by offset, and the tiering job (docs/config.md,
// README). It translates HTTP to the storage and tiering APIs and back.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"strata/catalog"
	"strata/cluster"
	"strata/engine/record"
	"strata/engine/segment"
	"strata/engine/store"
	"strata/icetable/restcat"
	"strata/metadata"
	"strata/tiering"
	"strata/topicconfig"
)

// Config is what the admin API serves.
type Config struct {
	// Store answers reads; Engine (the segment engine) knows segments.
	Store  store.Store
	Engine *segment.Engine
	// Catalog knows each segment's tier.
	Catalog catalog.Catalog
	// Cluster is this node's view of its cluster; nil on a single node.
	Cluster *cluster.Member
	Job     *tiering.Job
	// Topics, if set, serves topic configs (GET /v1/topics/{topic},
	// PATCH /v1/topics/{topic}/configs) over TopicDefaults, the broker's
	// settings: the metadata the Kafka front end answers from too.
	Topics        metadata.Cluster
	TopicDefaults topicconfig.Broker
	// Metrics serves GET /metrics (Prometheus).
	Metrics http.Handler
	// Token, when set, is the bearer token every endpoint but the health
	// checks requires.
	Token string
	// Authenticated says the Kafka listener authenticates its clients
	// (SASL): the admin API then serves records and changes configs only
	// behind Token, so with none set it answers just the health checks
	// and metrics, as Kafka's own tools need credentials once auth is on.
	Authenticated bool
	// Scrub, if set, serves GET /v1/scrub: the damaged local copies the
	// scrubber found and what became of each.
	Scrub interface{ Report() any }
	// ColdScrub, if set, serves POST /v1/scrub/cold/run: one cold scrub
	// now (tiering.ColdScrubber), its summary answered; its findings join
	// GET /v1/scrub's.
	ColdScrub func(ctx context.Context) (tiering.ColdScrubSummary, error)
	// Routes, if set, adds cmd's own routes (the topics' Iceberg tables),
	// behind the same token as the rest.
	Routes func(mux *http.ServeMux)
	// Iceberg, if set, is the Iceberg REST catalog (icetable/restcat),
	// served under /iceberg/ behind the same guard as the rest of the API.
	Iceberg http.Handler
}

// Locked says the API serves only its health checks and metrics: Kafka
// clients must authenticate and no admin token guards the rest.
func (c Config) Locked() bool { return c.Authenticated && c.Token == "" }

// Handler serves the API. A tiering run asked for over it ends early when
// ctx (the service) ends, as a scheduled one does.
func Handler(ctx context.Context, c Config) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ready") })
	if c.Metrics != nil {
		mux.Handle("GET /metrics", c.Metrics)
	}
	c.storage(mux)
	c.tiering(ctx, mux)
	c.topics(mux)
	if c.Routes != nil {
		c.Routes(mux)
	}
	if c.Scrub != nil {
		mux.HandleFunc("GET /v1/scrub", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, http.StatusOK, c.Scrub.Report()) })
	}
	if c.ColdScrub != nil {
		mux.HandleFunc("POST /v1/scrub/cold/run", func(w http.ResponseWriter, r *http.Request) {
			runCtx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(ctx, cancel)()
			sum, err := c.ColdScrub(runCtx)
			switch {
			case errors.Is(err, tiering.ErrColdScrubRunning):
				WriteJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			case err != nil:
				WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			default:
				WriteJSON(w, http.StatusOK, sum)
			}
		})
	}
	if c.Iceberg != nil {
		mux.Handle("/iceberg/", c.Iceberg)
	}
	if c.Locked() {
		return openOnly(mux)
	}
	return requireToken(c.Token, mux)
}

// iceberg tells a request to the Iceberg REST catalog, whose refusals are
// in the catalog's error model.
func iceberg(r *http.Request) bool {
	return r.URL.Path == "/iceberg" || strings.HasPrefix(r.URL.Path, "/iceberg/")
}

// openOnly serves the health checks and metrics and refuses the rest.
func openOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			next.ServeHTTP(w, r)
		case restcat.TokenPath:
			restcat.RefuseOAuth(w, "kafka.sasl is on and admin_token is not set: the admin API, and so strata's Iceberg catalog, "+
				"serves nothing but its health checks and metrics. The catalog issues no OAuth tokens: set admin_token, and give "+
				"it to the client as token= (pyiceberg: load_catalog(..., token=ADMIN_TOKEN)), not credential=")
		default:
			const msg = "kafka.sasl is on and admin_token is not set: " +
				"the admin API serves only /healthz, /readyz and /metrics; set admin_token to use the rest"
			if iceberg(r) {
				restcat.Refuse(w, http.StatusForbidden, msg)
				return
			}
			WriteJSON(w, http.StatusForbidden, map[string]string{"error": msg})
		}
	})
}

// requireToken guards everything but the health checks with a bearer
// token, when one is configured.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme is case-insensitive (RFC 7235), the token is not.
		scheme, given, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		// The token endpoint is asked before the client has a token: the
		// catalog answers it (it mints none) in OAuth's error model.
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && r.URL.Path != restcat.TokenPath &&
			(!strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(given), want) != 1) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			const msg = "a bearer token is required (admin_token)"
			if iceberg(r) {
				restcat.Refuse(w, http.StatusUnauthorized, msg)
				return
			}
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c Config) tiering(ctx context.Context, mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tiering/run", func(w http.ResponseWriter, r *http.Request) {
		runCtx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		sum, err := c.Job.Run(runCtx)
		if errors.Is(err, tiering.ErrRunning) {
			WriteJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			return
		}
		if err != nil {
			WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		WriteJSON(w, http.StatusOK, sum)
	})
	mux.HandleFunc("POST /v1/tiering/retype", func(w http.ResponseWriter, r *http.Request) {
		c.retype(ctx, w, r)
	})
	mux.HandleFunc("GET /v1/tiering/jobs", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, c.Job.History())
	})
}

// retype is POST /v1/tiering/retype?topic=T: tiering.Job.Retype of each
// of the topic's shards this node has, its progress streamed as a JSON
// line per object (tiering.RetypeProgress), then a line with the summary
// ({"done": …}), or the error that stopped it and what was done before
// ({"error": …, "stopped_after": …}); an error before any object is the
// answer's status (400: the topic asks for no typed column).
func (c Config) retype(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	topic := r.URL.Query().Get("topic")
	if topic == "" {
		WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "retype: name the topic: ?topic=NAME"})
		return
	}
	shards, err := c.Catalog.Shards()
	if err != nil {
		WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	var mine []string
	for _, sh := range shards {
		if tp, ok := store.ParseShard(sh.Name); ok && tp.Topic == topic {
			mine = append(mine, sh.Name)
		}
	}
	if len(mine) == 0 {
		WriteJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("retype: this node has no partition of topic %s", topic)})
		return
	}
	runCtx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	enc := json.NewEncoder(w)
	streaming := false
	stream := func() { // the 200 goes with the first object done
		if !streaming {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			streaming = true
		}
	}
	var total tiering.RetypeSummary
	for _, shard := range mine {
		sum, err := c.Job.Retype(runCtx, shard, func(p tiering.RetypeProgress) {
			stream()
			enc.Encode(p)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		})
		total.Objects, total.Rewritten, total.Skipped, total.Bytes = total.Objects+sum.Objects, total.Rewritten+sum.Rewritten,
			total.Skipped+sum.Skipped, total.Bytes+sum.Bytes
		switch {
		case err != nil && !streaming:
			status := http.StatusInternalServerError
			if errors.Is(err, tiering.ErrNoTypedColumns) {
				status = http.StatusBadRequest
			}
			WriteJSON(w, status, map[string]string{"error": err.Error()})
			return
		case err != nil:
			enc.Encode(map[string]any{"error": err.Error(), "stopped_after": total})
			return
		}
	}
	stream()
	enc.Encode(map[string]any{"done": total})
}

// WriteJSON answers v as indented JSON with status, as every admin route
// does (cmd's own routes too).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// shardInfo is one shard in GET /v1/shards.
type shardInfo struct {
	Shard         string `json:"shard"`
	LowWatermark  uint64 `json:"low_watermark"`
	HighWatermark uint64 `json:"high_watermark"`
	HotBytes      int64  `json:"hot_bytes"`  // the active segment
	WarmBytes     int64  `json:"warm_bytes"` // sealed local segments
	ColdBytes     int64  `json:"cold_bytes"` // objects in the cold tier
	Segments      int    `json:"segments"`
}

// recordJSON is a record in GET /v1/records; byte fields are base64.
type recordJSON struct {
	Offset       uint64          `json:"offset"`
	Timestamp    int64           `json:"timestamp"`
	Key          []byte          `json:"key"`
	Value        []byte          `json:"value"`
	Headers      []record.Header `json:"headers,omitempty"`
	Tags         []string        `json:"tags,omitempty"`
	ProtocolData []byte          `json:"protocol_data,omitempty"`
}

func (c Config) storage(mux *http.ServeMux) {
	st, seg, cat := c.Store, c.Engine, c.Catalog
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, clusterInfo(r.Context(), c))
	})
	mux.HandleFunc("GET /v1/shards", func(w http.ResponseWriter, r *http.Request) {
		names, err := st.Shards(r.Context())
		if err != nil {
			WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		seg.SyncEvents()
		out := []shardInfo{}
		for _, n := range names {
			info := shardInfo{Shard: n}
			info.LowWatermark, info.HighWatermark, _ = st.Watermarks(r.Context(), n)
			if segs, err := cat.Segments(n); err == nil {
				info.Segments = len(segs)
				for _, s := range segs {
					switch {
					case s.State == catalog.Active:
						info.HotBytes, _ = seg.ActiveBytes(n)
					case s.State == catalog.Sealed || s.State == catalog.Uploading:
						info.WarmBytes += s.Size
					case s.State == catalog.Cold:
						info.WarmBytes += s.Size
						info.ColdBytes += s.ObjectSize
					case s.State == catalog.Remote:
						info.ColdBytes += s.ObjectSize
					}
				}
			}
			out = append(out, info)
		}
		WriteJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/shards/{shard}/segments", func(w http.ResponseWriter, r *http.Request) {
		seg.SyncEvents()
		segs, err := cat.Segments(r.PathValue("shard"))
		if err != nil || len(segs) == 0 {
			WriteJSON(w, http.StatusNotFound, map[string]string{"error": "no segments for shard " + strconv.Quote(r.PathValue("shard"))})
			return
		}
		WriteJSON(w, http.StatusOK, segs)
	})
	mux.HandleFunc("GET /v1/records", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		offset, err1 := strconv.ParseUint(q.Get("offset"), 10, 64)
		max, err2 := strconv.Atoi(q.Get("max_records"))
		if q.Get("max_records") == "" {
			max, err2 = 100, nil
		}
		if q.Get("shard") == "" || err1 != nil || err2 != nil || max < 1 || max > 10000 {
			WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "want shard=NAME&offset=N[&max_records=1..10000]"})
			return
		}
		recs, err := st.Read(r.Context(), q.Get("shard"), offset, store.Budget{MaxRecords: max, MaxBytes: 16 << 20})
		var oor *store.OutOfRangeError
		switch {
		case errors.As(err, &oor):
			WriteJSON(w, http.StatusRequestedRangeNotSatisfiable, map[string]any{"error": err.Error(), "low": oor.Low, "high": oor.High})
			return
		case errors.Is(err, store.ErrUnknownShard):
			WriteJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
			return
		case err != nil:
			WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		out := make([]recordJSON, len(recs))
		for i, rc := range recs {
			out[i] = recordJSON{rc.Offset, rc.Timestamp, rc.Key, rc.Value, rc.Headers, rc.Tags, rc.ProtocolData}
		}
		WriteJSON(w, http.StatusOK, out)
	})
}

// clusterNode and clusterPartition are GET /v1/cluster's answer: the nodes,
// and each partition's leader, epoch and replicas, with the segments this
// node holds of it (each node answers for its own).
type clusterNode struct {
	ID         int32  `json:"id"`
	KafkaAddr  string `json:"kafka_addr,omitempty"`
	AdminAddr  string `json:"admin_addr,omitempty"`
	Alive      bool   `json:"alive"`
	Controller bool   `json:"controller"`
}

type clusterPartition struct {
	cluster.Partition
	Segments []segment.SegmentMeta `json:"segments_here,omitempty"`
}

type clusterAnswer struct {
	Cluster    bool               `json:"cluster"`
	Self       int32              `json:"self"`
	Live       bool               `json:"live"`
	Controller int32              `json:"controller"`
	Nodes      []clusterNode      `json:"nodes"`
	Partitions []clusterPartition `json:"partitions"`
}

func clusterInfo(ctx context.Context, c Config) clusterAnswer {
	here := func(shard string) []segment.SegmentMeta {
		if c.Engine == nil {
			return nil
		}
		segs, _ := c.Engine.Segments(shard)
		return segs
	}
	if c.Cluster == nil {
		out := clusterAnswer{Self: 0, Live: true, Controller: 0, Nodes: []clusterNode{{ID: 0, Alive: true, Controller: true}}}
		names, _ := c.Store.Shards(ctx)
		for _, n := range names {
			tp, ok := store.ParseShard(n)
			if !ok {
				continue
			}
			out.Partitions = append(out.Partitions, clusterPartition{Partition: cluster.Partition{Topic: tp.Topic, Partition: tp.Partition,
				Leader: 0, Epoch: -1, Replicas: []int32{0}, ISR: []int32{0}}, Segments: here(n)})
		}
		return out
	}
	m := c.Cluster
	out := clusterAnswer{Cluster: true, Self: m.Self(), Live: m.Live(), Controller: m.Controller()}
	for _, n := range m.Nodes() {
		out.Nodes = append(out.Nodes, clusterNode{ID: n.ID, KafkaAddr: n.KafkaAddr, AdminAddr: n.AdminAddr, Alive: true, Controller: n.ID == out.Controller})
	}
	topics := m.TopicRecords()
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for p := int32(0); p < topics[name].Partitions; p++ {
			cp := clusterPartition{Partition: cluster.Partition{Topic: name, Partition: p, Leader: -1, Epoch: -1}}
			if part, ok := m.Placement(name, p); ok {
				cp.Partition = part
			}
			cp.Segments = here(store.ShardName(name, p))
			out.Partitions = append(out.Partitions, cp)
		}
	}
	return out
}
