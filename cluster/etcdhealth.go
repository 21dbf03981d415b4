package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"strata/internal/promreg"
)

// compactor decides how far etcd's history may be compacted: to the
// revision etcd had retention ago, so a watcher (another node's view, a
// node's credentials) that lost its watch for less than that resumes
// where it was, and one that lost it for longer lists again. It is fed the
// current revision at each check and keeps one mark per check younger
// than retention.
type compactor struct {
	retention time.Duration
	marks     []revMark
	done      int64 // the last revision compacted to
}

type revMark struct {
	at  time.Time
	rev int64
}

// observe records that etcd was at rev at now, and returns the revision
// to compact to, or 0 when there is nothing new to compact.
func (c *compactor) observe(now time.Time, rev int64) int64 {
	c.marks = append(c.marks, revMark{now, rev})
	to := int64(0)
	i := 0
	for i < len(c.marks) && !c.marks[i].at.After(now.Add(-c.retention)) {
		to = c.marks[i].rev
		i++
	}
	c.marks = c.marks[i:]
	if to <= c.done {
		return 0
	}
	return to
}

// compacted records the revision etcd was compacted to.
func (c *compactor) compacted(rev int64) { c.done = max(c.done, rev) }

type etcdMetrics struct {
	dbSize, dbInUse, quota, full prometheus.Gauge
	compactions                  prometheus.Counter
	dbSizeValue                  float64 // what dbSize was last set to, for the log
}

func newEtcdMetrics(reg prometheus.Registerer) *etcdMetrics {
	return &etcdMetrics{
		dbSize: promreg.Gauge(reg, "strata_etcd_db_size_bytes",
			"Size of etcd's database (Maintenance Status DbSize); etcd refuses writes once it passes strata_etcd_quota_bytes."),
		dbInUse: promreg.Gauge(reg, "strata_etcd_db_size_in_use_bytes",
			"Bytes of etcd's database in use (DbSizeInUse); the rest is free after compaction, until a defragmentation returns it."),
		quota: promreg.Gauge(reg, "strata_etcd_quota_bytes",
			"etcd's --quota-backend-bytes as cluster.etcd_quota_bytes says it."),
		full: promreg.Gauge(reg, "strata_etcd_nospace_alarm",
			"1 while etcd's NOSPACE alarm is raised: it refuses writes until space is freed and the alarm disarmed (docs/cluster.md)."),
		compactions: promreg.Counter(reg, "strata_etcd_compactions_total",
			"Compactions of etcd's history this node made as controller."),
	}
}

// keepEtcdHealthy runs until ctx ends: every EtcdCheckInterval it reads
// etcd's database size and alarms into the metrics, says in the log when
// the NOSPACE alarm is raised and how to recover, and, while this node is
// controller, compacts etcd's history to the revision of
// EtcdCompactionRetention ago.
func (m *Member) keepEtcdHealthy(ctx context.Context) {
	defer m.wg.Done()
	met := newEtcdMetrics(m.cfg.Registerer)
	met.quota.Set(float64(m.cfg.EtcdQuotaBytes))
	c := &compactor{retention: m.cfg.EtcdCompactionRetention}
	wasFull := false
	t := time.NewTicker(m.cfg.EtcdCheckInterval)
	defer t.Stop()
	for {
		if full, ok := m.checkEtcd(ctx, met, c); ok && full != wasFull {
			if full {
				m.log.Error("cluster: etcd is full: its NOSPACE alarm is raised and it refuses every write (topics, offsets, placement) until an operator frees space: "+
					"etcdctl compact <current revision>, etcdctl defrag, etcdctl alarm disarm (docs/cluster.md, \"When etcd is full\")",
					"db_size", int64(met.dbSizeValue), "quota", m.cfg.EtcdQuotaBytes)
			} else {
				m.log.Info("cluster: etcd's NOSPACE alarm is cleared; it takes writes again")
			}
			wasFull = full
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkEtcd reads etcd's state once; ok is false when etcd could not be
// asked.
func (m *Member) checkEtcd(ctx context.Context, met *etcdMetrics, c *compactor) (full, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var size, inUse, rev int64
	for _, ep := range m.cli.Endpoints() {
		st, err := m.cli.Status(ctx, ep)
		if err != nil {
			continue
		}
		size, inUse, rev = max(size, st.DbSize), max(inUse, st.DbSizeInUse), max(rev, st.Header.Revision)
		ok = true
	}
	if !ok {
		return false, false
	}
	met.dbSize.Set(float64(size))
	met.dbSizeValue = float64(size)
	met.dbInUse.Set(float64(inUse))
	if alarms, err := m.cli.AlarmList(ctx); err == nil {
		for _, a := range alarms.Alarms {
			if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
				full = true
			}
		}
		met.full.Set(b2f(full))
	}
	if c.retention <= 0 || m.currentTerm().rev == 0 {
		return full, true
	}
	if to := c.observe(time.Now(), rev); to > 0 {
		_, err := m.cli.Compact(ctx, to)
		switch {
		case err == nil:
			c.compacted(to)
			met.compactions.Inc()
			m.log.Debug("cluster: compacted etcd's history", "revision", to)
		case errors.Is(err, rpctypes.ErrCompacted):
			c.compacted(to) // another compaction (an operator's) went as far
		default:
			m.log.Warn("cluster: compacting etcd's history", "revision", to, "err", err)
		}
	}
	return full, true
}
