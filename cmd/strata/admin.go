package main

import (
	"errors"
	"net/http"
	"strconv"

	"strata/catalog"
	"strata/engine"
	"strata/engine/record"
	"strata/engine/store"
)

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

func adminHandlers(mux *http.ServeMux, st *engine.Adapter) {
	seg := st.SegmentEngine()
	mux.HandleFunc("GET /v1/shards", func(w http.ResponseWriter, r *http.Request) {
		names, err := st.Shards(r.Context())
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		out := []shardInfo{}
		for _, n := range names {
			info := shardInfo{Shard: n}
			info.LowWatermark, info.HighWatermark, _ = st.Watermarks(r.Context(), n)
			if segs, err := seg.Catalog().Segments(n); err == nil {
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
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/shards/{shard}/segments", func(w http.ResponseWriter, r *http.Request) {
		segs, err := seg.Catalog().Segments(r.PathValue("shard"))
		if err != nil || len(segs) == 0 {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no segments for shard " + strconv.Quote(r.PathValue("shard"))})
			return
		}
		writeJSON(w, http.StatusOK, segs)
	})
	mux.HandleFunc("GET /v1/records", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		offset, err1 := strconv.ParseUint(q.Get("offset"), 10, 64)
		max, err2 := strconv.Atoi(q.Get("max_records"))
		if q.Get("max_records") == "" {
			max, err2 = 100, nil
		}
		if q.Get("shard") == "" || err1 != nil || err2 != nil || max < 1 || max > 10000 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want shard=NAME&offset=N[&max_records=1..10000]"})
			return
		}
		recs, err := st.Read(r.Context(), q.Get("shard"), offset, store.Budget{MaxRecords: max, MaxBytes: 16 << 20})
		var oor *store.OutOfRangeError
		switch {
		case errors.As(err, &oor):
			writeJSON(w, http.StatusRequestedRangeNotSatisfiable, map[string]any{"error": err.Error(), "low": oor.Low, "high": oor.High})
			return
		case errors.Is(err, store.ErrUnknownShard):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
			return
		case err != nil:
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		out := make([]recordJSON, len(recs))
		for i, rc := range recs {
			out[i] = recordJSON{rc.Offset, rc.Timestamp, rc.Key, rc.Value, rc.Headers, rc.Tags, rc.ProtocolData}
		}
		writeJSON(w, http.StatusOK, out)
	})
}
