package admin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"strata/catalog"
	"strata/engine/store"
	"strata/metadata"
	"strata/topicconfig"
)

// TopicView is GET /v1/topics/{topic}: the topic's configs with their
// sources, and each partition's offsets and bytes per tier on this node.
type TopicView struct {
	Topic      string          `json:"topic"`
	Configs    []ConfigView    `json:"configs"`
	Partitions []PartitionView `json:"partitions"`
}

// ConfigView is one config: its value and where it comes from.
type ConfigView struct {
	Name     string   `json:"name"`
	Value    string   `json:"value"`
	Source   string   `json:"source"`
	Synonyms []string `json:"synonyms,omitempty"`
}

// PartitionView is one partition on this node. TieringLagBytes are the
// sealed bytes not yet in the cold tier; OldestUntiered is when the oldest
// of them was sealed.
type PartitionView struct {
	Partition       int32     `json:"partition"`
	LowWatermark    uint64    `json:"low_watermark"`
	HighWatermark   uint64    `json:"high_watermark"`
	HotBytes        int64     `json:"hot_bytes"`
	WarmBytes       int64     `json:"warm_bytes"`
	ColdBytes       int64     `json:"cold_bytes"`
	LocalSegments   int       `json:"local_segments"`
	ColdSegments    int       `json:"cold_segments"`
	TieredUpTo      int64     `json:"tiered_up_to"` // the last offset in the cold tier, -1: none
	TieringLagBytes int64     `json:"tiering_lag_bytes"`
	OldestUntiered  time.Time `json:"oldest_untiered,omitzero"`
	Error           string    `json:"error,omitempty"`
}

// configChange is PATCH /v1/topics/{topic}/configs' body.
type configChange struct {
	Set    map[string]string `json:"set"`
	Delete []string          `json:"delete"`
}

func (c Config) topics(mux *http.ServeMux) {
	if c.Topics == nil {
		return
	}
	mux.HandleFunc("GET /v1/topics/{topic}", func(w http.ResponseWriter, r *http.Request) {
		topic := r.PathValue("topic")
		v, err := c.describeTopic(r.Context(), topic)
		if err != nil {
			writeError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, v)
	})
	mux.HandleFunc("PATCH /v1/topics/{topic}/configs", func(w http.ResponseWriter, r *http.Request) {
		topic := r.PathValue("topic")
		var ch configChange
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ch); err != nil {
			WriteJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"set": {"key": "value"}, "delete": ["key"]}: ` + err.Error()})
			return
		}
		if err := c.alterTopic(r.Context(), topic, ch); err != nil {
			writeError(w, err)
			return
		}
		v, err := c.describeTopic(r.Context(), topic)
		if err != nil {
			writeError(w, err)
			return
		}
		WriteJSON(w, http.StatusOK, v)
	})
}

// writeError answers a topic request's error: a refused config is the
// caller's (400), a topic that does not exist is 404, anything else 500.
func writeError(w http.ResponseWriter, err error) {
	var ce *topicconfig.Error
	switch {
	case errors.As(err, &ce): // its own words: a store's wrapping names no key
		WriteJSON(w, http.StatusBadRequest, map[string]string{"error": ce.Error()})
	case errors.Is(err, metadata.ErrUnknownTopic):
		WriteJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	default:
		WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	}
}

// alterTopic sets and deletes some of a topic's configs with the checks
// Kafka's IncrementalAlterConfigs makes (metadata.Alter): an unknown key,
// or one named twice, is refused.
func (c Config) alterTopic(ctx context.Context, topic string, ch configChange) error {
	topics, err := c.Topics.Topics(ctx)
	if err != nil {
		return err
	}
	if _, ok := topics[topic]; !ok {
		return metadata.ErrUnknownTopic
	}
	err = metadata.Alter(ctx, c.Topics, c.TopicDefaults, topic, false, func(cur topicconfig.Overrides) (topicconfig.Overrides, error) {
		if cur == nil {
			cur = topicconfig.Overrides{}
		}
		for k, v := range ch.Set {
			if _, known := topicconfig.Lookup(k); !known {
				return nil, &topicconfig.Error{Key: k, Unknown: true}
			}
			cur[k] = v
		}
		deleted := map[string]bool{}
		for _, k := range ch.Delete {
			if _, set := ch.Set[k]; set || deleted[k] {
				return nil, &topicconfig.Error{Key: topic, Message: "Error due to duplicate config keys"}
			}
			deleted[k] = true
			if _, known := topicconfig.Lookup(k); !known {
				return nil, &topicconfig.Error{Key: k, Unknown: true}
			}
			delete(cur, k)
		}
		return cur, nil
	})
	if err == nil {
		slog.Info("topic configs altered", "topic", topic, "configs", c.Topics.TopicConfigs(topic))
	}
	return err
}

func (c Config) describeTopic(ctx context.Context, topic string) (TopicView, error) {
	topics, err := c.Topics.Topics(ctx)
	if err != nil {
		return TopicView{}, err
	}
	parts, ok := topics[topic]
	if !ok {
		return TopicView{}, metadata.ErrUnknownTopic
	}
	entries := topicconfig.Describe(c.Topics.TopicConfigs(topic), c.TopicDefaults)
	v := TopicView{Topic: topic, Configs: []ConfigView{}, Partitions: []PartitionView{}}
	for _, e := range entries {
		cv := ConfigView{Name: e.Name, Value: e.Value, Source: e.Source.String()}
		for _, s := range e.Synonyms {
			cv.Synonyms = append(cv.Synonyms, s.Name+"="+s.Value+" ("+s.Source.String()+")")
		}
		v.Configs = append(v.Configs, cv)
	}
	if c.Engine != nil {
		c.Engine.SyncEvents()
	}
	for p := int32(0); p < parts; p++ {
		shard := store.ShardName(topic, p)
		pv := PartitionView{Partition: p, TieredUpTo: -1}
		var err error
		if pv.LowWatermark, pv.HighWatermark, err = c.Store.Watermarks(ctx, shard); err != nil {
			pv.Error = err.Error() // led by another node, or not placed yet
		}
		segs, _ := c.Catalog.Segments(shard)
		for _, s := range segs {
			switch s.State {
			case catalog.Active:
				if c.Engine != nil {
					pv.HotBytes, _ = c.Engine.ActiveBytes(shard)
				}
				pv.LocalSegments++
			case catalog.Sealed, catalog.Uploading:
				pv.WarmBytes += s.Size
				pv.LocalSegments++
				pv.TieringLagBytes += s.Size
				if pv.OldestUntiered.IsZero() || s.SealedAt.Before(pv.OldestUntiered) {
					pv.OldestUntiered = s.SealedAt
				}
			case catalog.Cold:
				pv.WarmBytes += s.Size
				pv.ColdBytes += s.ObjectSize
				pv.LocalSegments++
				pv.ColdSegments++
				pv.TieredUpTo = int64(s.EndOffset)
			case catalog.Remote:
				pv.ColdBytes += s.ObjectSize
				pv.ColdSegments++
				pv.TieredUpTo = int64(s.EndOffset)
			}
		}
		v.Partitions = append(v.Partitions, pv)
	}
	return v, nil
}
