package kafka

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metrics counts requests by API and the error codes answered.
type Metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	refusals *prometheus.CounterVec
	inflight prometheus.Gauge
	answers  prometheus.Gauge
	ahead    *prometheus.CounterVec
}

// NewMetrics registers the Kafka front end's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_kafka_requests_total",
			Help: "Kafka requests answered, by API."}, []string{"api"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_kafka_errors_total",
			Help: "Kafka error codes answered (per topic or partition), by API and code."}, []string{"api", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strata_kafka_request_duration_seconds",
			Help:    "Kafka request latency, by API (Produce: append and fsync; Fetch: includes long poll).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}, []string{"api"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_kafka_refused_total",
			Help: "Connections and frames refused by a resource bound (connections, frame_size)."}, []string{"bound"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_kafka_inflight_request_bytes",
			Help: "Request bytes held across all connections (kafka.max_inflight_request_bytes bounds it)."}),
		answers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_kafka_inflight_fetch_bytes",
			Help: "Fetch answer bytes built and not yet written, all connections together (kafka.max_inflight_fetch_bytes bounds it)."}),
		ahead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_kafka_fetch_read_ahead_total",
			Help: "Partitions of fetch answers framed ahead, by what became of them: used by the next fetch, unused (it asked for other offsets or limits), stale (the log start or high watermark moved past them)."}, []string{"result"}),
	}
	reg.MustRegister(m.requests, m.errors, m.latency, m.refusals, m.inflight, m.answers, m.ahead)
	return m
}

func (m *Metrics) refused(bound string) {
	if m != nil {
		m.refusals.WithLabelValues(bound).Inc()
	}
}

func (m *Metrics) readAhead(result string) {
	if m != nil {
		m.ahead.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) setInflight(n int64) {
	if m != nil {
		m.inflight.Set(float64(n))
	}
}

func (m *Metrics) setAnswers(n int64) {
	if m != nil {
		m.answers.Set(float64(n))
	}
}

func (m *Metrics) observe(req kmsg.Request, resp kmsg.Response, start time.Time) {
	if m == nil {
		return
	}
	api := kmsg.NameForKey(req.Key())
	m.requests.WithLabelValues(api).Inc()
	m.latency.WithLabelValues(api).Observe(time.Since(start).Seconds())
	for _, code := range errorCodes(resp) {
		if code != 0 {
			m.errors.WithLabelValues(api, strconv.Itoa(int(code))).Inc()
		}
	}
}

func errorCodes(resp kmsg.Response) []int16 {
	var out []int16
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				out = append(out, p.ErrorCode)
			}
		}
	case *kmsg.FetchResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				out = append(out, p.ErrorCode)
			}
		}
	case *kmsg.ListOffsetsResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				out = append(out, p.ErrorCode)
			}
		}
	case *kmsg.MetadataResponse:
		for _, t := range r.Topics {
			out = append(out, t.ErrorCode)
		}
	case *kmsg.CreateTopicsResponse:
		for _, t := range r.Topics {
			out = append(out, t.ErrorCode)
		}
	case *kmsg.SASLAuthenticateResponse:
		out = append(out, r.ErrorCode)
	case *kmsg.DeleteRecordsResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				out = append(out, p.ErrorCode)
			}
		}
	}
	return out
}
