package workload

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Outcome is what the service's answer to an operation tells about it.
type Outcome int

const (
	// OK: the service acknowledged the operation.
	OK Outcome = iota
	// Refused: the service answered with an error; nothing was done.
	Refused
	// Exists: CreateTopics answered TOPIC_ALREADY_EXISTS.
	Exists
	// NotFound: the service answered UNKNOWN_TOPIC_OR_PARTITION.
	NotFound
	// Unknown: no answer (timeout, connection lost, the process killed) or
	// an error after partial work: the operation may or may not have happened.
	Unknown
)

func (o Outcome) String() string {
	return [...]string{"ok", "refused", "exists", "not-found", "unknown"}[o]
}

// IncState is what the model knows of a topic incarnation.
type IncState int

const (
	// Live: created (acknowledged) and not deleted.
	Live IncState = iota
	// Uncertain: a create or delete of it had an unknown outcome; the
	// driver settles it by deleting the topic until the service says so.
	Uncertain
	// Deleted: a delete was acknowledged (or it never existed).
	Deleted
)

func (s IncState) String() string { return [...]string{"live", "uncertain", "deleted"}[s] }

// Incarnation is one life of a topic name: a topic re-created after a
// delete is a new incarnation, and must not serve the old one's records.
type Incarnation struct {
	ID         int
	Name       string
	Partitions int32
	State      IncState
	Created    int64 // tick the create began
	DeletedAt  int64 // tick the acknowledged delete ended (0 while not deleted)
	Parts      []*Part
}

// Part is the model of one partition of an incarnation.
type Part struct {
	// Acked maps offsets to the records acknowledged there (strictly: the
	// produce did not race a create or delete of the topic).
	Acked map[int64]*Sent
	// LowMin is the highest DeleteRecords offset acknowledged, at tick
	// LowMinTick; LowMax the highest attempted (acknowledged or not).
	LowMin, LowMinTick, LowMax int64
	// NextAcked is one past the highest acknowledged offset.
	NextAcked int64
	// seen maps offsets to the id read there first: an offset must never
	// serve a different record later.
	seen map[int64]string
}

// SentState is what the model knows of a produced record.
type SentState int

const (
	Pending SentState = iota // produce in flight
	Acked                    // acknowledged at Offset
	Maybe                    // error or no answer: may be stored, at most once
)

// Sent is one produced record and what became of it.
type Sent struct {
	ID        string
	Rec       Rec
	Topic     string
	Partition int32
	Inc       int   // the incarnation it was produced to
	Op        int64 // the produce operation
	Index     int   // its place among the op's records for this partition
	State     SentState
	Offset    int64 // when Acked
	AckTick   int64
	Begin     int64 // ticks the produce began and ended
	End       int64
	// Loose: the produce raced a create or delete of its topic, so it may
	// have landed in any incarnation alive during it, at any offset.
	Loose bool
	// Oversize: over the broker's limits; must be refused, never stored.
	Oversize bool
}

// Model is what the service must serve, built from the operations' outcomes.
// It is safe for concurrent use.
type Model struct {
	mu        sync.Mutex
	tick      int64
	opSeq     int64
	retention time.Duration
	names     map[string]*nameState
	incs      []*Incarnation // by ID-1
	recs      map[string]*Sent
	history   []Event
}

type nameState struct {
	incs []*Incarnation
	// changes counts beginnings and ends of creates and deletes; busy is
	// how many are under way. An operation that saw either move raced one.
	changes int64
	busy    int
}

// Event is one line of the operation history.
type Event struct {
	Tick   int64
	Worker int
	Topic  string
	Text   string
}

// NewModel returns an empty model. Records whose timestamp is older than
// retention may be removed by the service's retention (0: none may).
func NewModel(retention time.Duration) *Model {
	return &Model{retention: retention, names: map[string]*nameState{}, recs: map[string]*Sent{}}
}

// Tick advances and returns the model's logical clock.
func (m *Model) Tick() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	return m.tick
}

// Logf appends a line to the history.
func (m *Model) Logf(worker int, topic, format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	m.history = append(m.history, Event{m.tick, worker, topic, fmt.Sprintf(format, args...)})
}

// History returns the last n events that mention topic ("" for all), as
// lines.
func (m *Model) History(topic string, n int) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for i := len(m.history) - 1; i >= 0 && len(out) < n; i-- {
		e := m.history[i]
		if topic == "" || e.Topic == "" || e.Topic == topic {
			out = append(out, fmt.Sprintf("t%-6d w%d %s", e.Tick, e.Worker, e.Text))
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func (m *Model) name(n string) *nameState {
	s := m.names[n]
	if s == nil {
		s = &nameState{}
		m.names[n] = s
	}
	return s
}

// live is the name's live incarnation, or nil.
func (s *nameState) live() *Incarnation {
	if len(s.incs) > 0 && s.incs[len(s.incs)-1].State == Live {
		return s.incs[len(s.incs)-1]
	}
	return nil
}

// unsettled is the name's uncertain incarnation, or nil.
func (s *nameState) unsettled() *Incarnation {
	if len(s.incs) > 0 && s.incs[len(s.incs)-1].State == Uncertain {
		return s.incs[len(s.incs)-1]
	}
	return nil
}

func (m *Model) newInc(name string, partitions int32, state IncState, created int64) *Incarnation {
	inc := &Incarnation{ID: len(m.incs) + 1, Name: name, Partitions: partitions, State: state, Created: created}
	for range partitions {
		inc.Parts = append(inc.Parts, &Part{Acked: map[int64]*Sent{}, seen: map[int64]string{}})
	}
	m.incs = append(m.incs, inc)
	s := m.name(name)
	s.incs = append(s.incs, inc)
	return inc
}

// Inc returns incarnation id (nil for 0 or unknown).
func (m *Model) Inc(id int) *Incarnation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inc(id)
}

func (m *Model) inc(id int) *Incarnation {
	if id <= 0 || id > len(m.incs) {
		return nil
	}
	return m.incs[id-1]
}

// Lifecycle is a create or delete under way. The driver runs at most one
// per topic name at a time, so a name's incarnations are totally ordered.
type Lifecycle struct {
	name  string
	begin int64
}

// BeginLifecycle marks a create or delete of name as started.
func (m *Model) BeginLifecycle(name string) Lifecycle {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	s := m.name(name)
	s.changes++
	s.busy++
	return Lifecycle{name, m.tick}
}

func (m *Model) endLifecycle(l Lifecycle) *nameState {
	m.tick++
	s := m.name(l.name)
	s.changes++
	s.busy--
	return s
}

// EndCreate records the outcome of creating l's topic with partitions.
func (m *Model) EndCreate(l Lifecycle, partitions int32, o Outcome) []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.endLifecycle(l)
	switch o {
	case OK:
		if inc := s.live(); inc != nil {
			inc.State = Deleted // whatever it was, the service replaced it
			return []Violation{{Kind: KindTopic, Topic: l.name, Partition: -1, Offset: -1,
				Detail: fmt.Sprintf("CreateTopics succeeded while incarnation #%d was live (TOPIC_ALREADY_EXISTS expected)", inc.ID)}}
		}
		m.newInc(l.name, partitions, Live, l.begin)
	case Exists:
		if s.live() == nil && s.unsettled() == nil {
			// The service holds something under a name whose every
			// incarnation was deleted: settle it like an uncertain one.
			m.newInc(l.name, 0, Uncertain, l.begin)
			return []Violation{{Kind: KindTopic, Topic: l.name, Partition: -1, Offset: -1,
				Detail: "CreateTopics answered TOPIC_ALREADY_EXISTS, but the topic's deletion was acknowledged"}}
		}
	case Unknown:
		if s.live() == nil && s.unsettled() == nil {
			m.newInc(l.name, partitions, Uncertain, l.begin)
		}
	}
	return nil
}

// EndDelete records the outcome of deleting l's topic.
func (m *Model) EndDelete(l Lifecycle, o Outcome) []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.endLifecycle(l)
	cur := s.live()
	if cur == nil {
		cur = s.unsettled()
	}
	switch o {
	case OK:
		if cur == nil {
			return []Violation{{Kind: KindTopic, Topic: l.name, Partition: -1, Offset: -1,
				Detail: "DeleteTopics succeeded, but the topic's deletion was already acknowledged"}}
		}
		cur.State, cur.DeletedAt = Deleted, m.tick
	case NotFound:
		if cur != nil && cur.State == Live {
			cur.State, cur.DeletedAt = Deleted, m.tick
			return []Violation{{Kind: KindTopic, Topic: l.name, Partition: -1, Offset: -1,
				Detail: fmt.Sprintf("DeleteTopics answered UNKNOWN_TOPIC_OR_PARTITION for live incarnation #%d (%d partitions)", cur.ID, cur.Partitions)}}
		}
		if cur != nil {
			cur.State, cur.DeletedAt = Deleted, m.tick
		}
	case Unknown:
		if cur != nil {
			cur.State = Uncertain
		}
	}
	return nil
}

// Unsettled lists names with an uncertain incarnation, for the driver to
// settle by deleting them.
func (m *Model) Unsettled() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for n, s := range m.names {
		if s.unsettled() != nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Changes returns how often creates and deletes of name began or ended,
// and whether one is under way: a read that saw either move raced one.
func (m *Model) Changes(name string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.name(name)
	return s.changes, s.busy > 0
}

// Live returns the name's live incarnation (nil if none).
func (m *Model) Live(name string) *Incarnation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.name(name).live()
}

// Produced is a produce under way.
type Produced struct {
	Topic   string
	Inc     int
	IDs     []string
	op      int64
	begin   int64
	changes int64
	raced   bool
}

// ProduceRec is one record of a produce operation.
type ProduceRec struct {
	Partition int32
	Rec       Rec
	Oversize  bool
}

// BeginProduce registers recs as in flight to topic's live incarnation;
// nil if the topic has none (the driver then skips the operation).
func (m *Model) BeginProduce(topic string, recs []ProduceRec) *Produced {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.name(topic)
	inc := s.live()
	if inc == nil {
		return nil
	}
	m.tick++
	m.opSeq++
	p := &Produced{Topic: topic, Inc: inc.ID, op: m.opSeq, begin: m.tick, changes: s.changes, raced: s.busy > 0}
	index := map[int32]int{}
	for _, r := range recs {
		id := r.Rec.ID()
		if _, dup := m.recs[id]; dup || id == "" {
			panic(fmt.Sprintf("workload: record id %q reused or missing", id))
		}
		m.recs[id] = &Sent{ID: id, Rec: r.Rec.compact(), Topic: topic, Partition: r.Partition, Inc: inc.ID, Op: p.op,
			Index: index[r.Partition], Begin: p.begin, Oversize: r.Oversize}
		index[r.Partition]++
		p.IDs = append(p.IDs, id)
	}
	return p
}

// Result is the answer for one produced record.
type Result struct {
	Offset  int64
	Outcome Outcome
	Err     string
}

// EndProduce records the answers, one per record in BeginProduce's order.
func (m *Model) EndProduce(p *Produced, results []Result) []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	s := m.name(p.Topic)
	raced := p.raced || s.changes != p.changes
	inc := m.inc(p.Inc)
	var vs []Violation
	for i, id := range p.IDs {
		r := m.recs[id]
		r.End, r.Loose = m.tick, raced
		res := results[i]
		if res.Outcome != OK {
			r.State = Maybe
			continue
		}
		r.State, r.Offset, r.AckTick = Acked, res.Offset, m.tick
		switch {
		case r.Oversize:
			vs = append(vs, Violation{Kind: KindOversize, Topic: p.Topic, Partition: r.Partition, Offset: res.Offset,
				Detail: fmt.Sprintf("record %s (%d value bytes) is over the broker's limits but was acknowledged", id, len(r.Rec.Value))})
		case raced || int(r.Partition) >= len(inc.Parts):
			// raced a create or delete: it may be in any incarnation alive meanwhile
		default:
			part := inc.Parts[r.Partition]
			if prev := part.Acked[res.Offset]; prev != nil {
				vs = append(vs, Violation{Kind: KindChanged, Topic: p.Topic, Partition: r.Partition, Offset: res.Offset,
					Detail: fmt.Sprintf("offset acknowledged twice: for %s and for %s", prev.ID, id)})
			}
			part.Acked[res.Offset] = r
			part.NextAcked = max(part.NextAcked, res.Offset+1)
		}
	}
	return vs
}

// DeletingRecords is a DeleteRecords under way.
type DeletingRecords struct {
	Topic     string
	Inc       int
	Partition int32
	Offset    int64
	changes   int64
	raced     bool
}

// BeginDeleteRecords notes that offsets below off of a partition of the
// topic's live incarnation may become unreadable; nil if it has none.
func (m *Model) BeginDeleteRecords(topic string, partition int32, off int64) *DeletingRecords {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.name(topic)
	inc := s.live()
	if inc == nil || int(partition) >= len(inc.Parts) {
		return nil
	}
	m.tick++
	part := inc.Parts[partition]
	part.LowMax = max(part.LowMax, off)
	return &DeletingRecords{topic, inc.ID, partition, off, s.changes, s.busy > 0}
}

// EndDeleteRecords records the outcome; low is the low watermark the
// service answered with (on OK).
func (m *Model) EndDeleteRecords(d *DeletingRecords, o Outcome, low int64) []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick++
	s := m.name(d.Topic)
	if d.raced || s.changes != d.changes {
		// It may have reached any incarnation alive meanwhile.
		for _, inc := range s.incs {
			if inc.ID >= d.Inc && int(d.Partition) < len(inc.Parts) {
				inc.Parts[d.Partition].LowMax = max(inc.Parts[d.Partition].LowMax, d.Offset)
			}
		}
		return nil
	}
	if o != OK {
		return nil
	}
	part := m.inc(d.Inc).Parts[d.Partition]
	if d.Offset > part.LowMin {
		part.LowMin, part.LowMinTick = d.Offset, m.tick
	}
	if low < d.Offset {
		return []Violation{{Kind: KindLowWatermark, Topic: d.Topic, Partition: d.Partition, Offset: d.Offset,
			Detail: fmt.Sprintf("DeleteRecords before %d acknowledged with low watermark %d", d.Offset, low)}}
	}
	return nil
}

// TopicView is a live topic as the generator sees it.
type TopicView struct {
	Name       string
	Inc        int
	Partitions int32
	Next       []int64 // per partition: one past the highest acknowledged offset
	Low        []int64 // per partition: the highest acknowledged DeleteRecords offset
}

// View is what the generator may base its choices on.
type View struct {
	Live []TopicView // settled live topics, by name
	Free []string    // names with no live or uncertain incarnation
}

// View returns a snapshot for the generator over the pool of names.
func (m *Model) View(names []string) View {
	m.mu.Lock()
	defer m.mu.Unlock()
	var v View
	for _, n := range names {
		s := m.name(n)
		switch inc := s.live(); {
		case inc != nil:
			tv := TopicView{Name: n, Inc: inc.ID, Partitions: inc.Partitions}
			for _, p := range inc.Parts {
				tv.Next = append(tv.Next, p.NextAcked)
				tv.Low = append(tv.Low, p.LowMin)
			}
			v.Live = append(v.Live, tv)
		case s.unsettled() == nil:
			v.Free = append(v.Free, n)
		}
	}
	return v
}

// Expected lists each name of the pool with its live incarnation (0 if the
// service must not list it), for the full check.
func (m *Model) Expected(names []string) map[string]*Incarnation {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]*Incarnation{}
	for _, n := range names {
		out[n] = m.name(n).live()
	}
	return out
}

// Stats counts records by state, for the log.
func (m *Model) Stats() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[SentState]int{}
	for _, r := range m.recs {
		n[r.State]++
	}
	return fmt.Sprintf("%d incarnations, %d records acknowledged, %d maybe stored, %d pending", len(m.incs), n[Acked], n[Maybe], n[Pending])
}
