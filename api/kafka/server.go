// Package kafka is strata's Kafka wire front end: it reads request frames,
// decodes them with franz-go's kmsg, answers through the storage API, and
// writes the responses back in order. Produce unpacks record batches into
// protocol-neutral records; Fetch reframes stored records into uncompressed
// v2 batches (docs/design.md).
package kafka

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
	"strata/metadata"
	"strata/partition"
	"strata/peer"
	"strata/topicconfig"
)

// Config tunes the front end.
type Config struct {
	// AutoCreateTopics creates a topic on first use (Metadata allowing it,
	// or Produce), with DefaultPartitions partitions.
	AutoCreateTopics  bool
	DefaultPartitions int32
	// DefaultReplicationFactor is a new topic's when its request leaves it
	// to the broker (-1), as Kafka's default.replication.factor (1).
	DefaultReplicationFactor int16
	// MaxRequestBytes refuses larger frames (100 MiB); requests other than
	// Produce may be at most MaxControlRequestBytes (1 MiB), since decoding
	// one allocates many times its size.
	MaxRequestBytes        int32
	MaxControlRequestBytes int32
	// MaxInflightBytes bounds the request bytes held across all connections
	// (256 MiB): a request whose frame does not fit waits for room.
	MaxInflightBytes int64
	// MaxInflatedBytes bounds what one Produce request's batches may
	// decompress to, all partitions together (128 MiB).
	MaxInflatedBytes int
	// MaxMessageBytes is Kafka's message.max.bytes: the largest record
	// batch a Produce may carry (1048588), unless TopicDefaults or the
	// topic's max.message.bytes says otherwise.
	MaxMessageBytes int32
	// TopicDefaults are the broker's settings topics fall back to (what
	// strata's config file sets), by topic config name.
	TopicDefaults topicconfig.Broker
	// MaxPartitions bounds the partitions of the broker (20000) and of one
	// topic (MaxPartitionsPerTopic, 10000).
	MaxPartitions         int
	MaxPartitionsPerTopic int32
	// OffsetMetadataMaxBytes is Kafka's offset.metadata.max.bytes: the
	// longest metadata an OffsetCommit may keep with a position (4096).
	OffsetMetadataMaxBytes int
	// MaxConnections bounds open connections in all (10000) and from one
	// client address (MaxConnectionsPerIP, 1000).
	MaxConnections      int
	MaxConnectionsPerIP int
	// FrameTimeout is how long a frame's body may take to arrive once its
	// size is read (30s).
	FrameTimeout time.Duration
	// IdleTimeout closes connections silent for this long (10m).
	IdleTimeout time.Duration
	// MaxFetchWait caps a fetch's long poll, whatever the client asks (30s).
	MaxFetchWait time.Duration
	// FetchMaxBytes caps a consumer's Fetch max_bytes (57671680, Kafka's
	// fetch.max.bytes). MaxInflightFetchBytes bounds the fetch answers
	// built and not yet written, all connections together (256 MiB).
	FetchMaxBytes         int32
	MaxInflightFetchBytes int64
	// MaxReadAheadBytes bounds the fetch answers framed ahead for
	// consumers catching up, all connections together; 0 (the default)
	// turns read-ahead off (readahead.go).
	MaxReadAheadBytes int64
	// Offsets keeps consumer groups' committed offsets; nil keeps them in
	// memory (tests).
	Offsets OffsetStore
	// GroupInitialWait is how long a new group's first rebalance waits for
	// more members (300ms; Kafka's group.initial.rebalance.delay.ms).
	GroupInitialWait time.Duration
	// GroupMaxRebalanceWait caps how long a rebalance waits for members to
	// rejoin, whatever timeout they ask for (5m).
	GroupMaxRebalanceWait time.Duration
	// LogDir is the folder DescribeLogDirs names: the data folder, where
	// each shard's local segments are.
	LogDir string
	// Cluster says who serves what and changes the topics; nil is this
	// node alone, its topic configs in memory (tests).
	Cluster metadata.Cluster
	// Peers is this node's client of the other nodes: a leader reads the
	// parts of a split log they hold with it (SplitLog, split.go). Nil:
	// this node alone.
	Peers *peer.Client
	// PeerFetches answers the Fetches other nodes mark as theirs
	// (followers' fetches, copy reads); fetch.go hands them over. Nil:
	// this node alone.
	PeerFetches *peer.Server
	// Partitions is the leader's append path (partition.Manager) the
	// cluster's replication and handoff share the partitions' gates with;
	// nil: one over Cluster, with no replication (a single node).
	Partitions *partition.Manager
	// PeerUser is the SASL user other nodes sign in as (cluster.peer_user):
	// with SASL on, only its requests are answered as a replica's.
	PeerUser string
	// PeerSecret is the cluster's shared secret (cluster.PeerSecret): this
	// node answers as a replica's only requests proved with it
	// (peer.Proofs). Nil: none is.
	PeerSecret []byte
	// Metrics, if set, counts requests and errors.
	Metrics *Metrics
	Logger  *slog.Logger
	// Auth, if set, requires SASL authentication and checks permissions
	// (auth.go).
	Auth *Auth
	// Schemas, if set, is the schema registry a topic with
	// strata.value.schema.validation checks its produced values against;
	// nil: this broker serves none, and such a topic's produces are refused.
	Schemas SchemaChecker
}

// SchemaChecker is the schema registry as produce validation asks it: why
// a record value does not start with the wire header of a schema
// registered under the subject (nil when it does).
type SchemaChecker interface {
	CheckWireHeader(subject string, value []byte) error
}

// Server answers Kafka clients from a store.
type Server struct {
	cfg   Config
	store store.Store
	log   *slog.Logger

	host string
	port int32

	mu      sync.Mutex
	groups  *groupServer
	offsets OffsetStore
	closing chan struct{} // closed by Shutdown: long polls end
	closed  sync.Once

	cluster metadata.Cluster
	// partitions is the leader's append path: Produce's appends, the
	// idempotent producers' state and the long polls' wake-ups.
	partitions *partition.Manager
	peerProofs peer.Proofs
	inflight   *budget
	// answers bounds the fetch answers built and not yet written (fetch.go).
	answers *budget
	// readAheadBytes is what the connections' read-aheads hold;
	// topicsDeleted counts the topics this node deleted, which a
	// read-ahead must not outlive (readahead.go).
	readAheadBytes atomic.Int64
	topicsDeleted  atomic.Int64
	refusals       sync.Map // log message -> *rate.Sometimes
	penalties      penalties

	conns  sync.WaitGroup
	ln     net.Listener
	open   map[net.Conn]bool
	perIP  map[string]int
	openMu sync.Mutex // guards ln, host, port, open and perIP
}

// New makes a server over s.
func New(s store.Store, cfg Config) *Server {
	if cfg.DefaultReplicationFactor <= 0 {
		cfg.DefaultReplicationFactor = 1
	}
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 100 << 20
	}
	if cfg.MaxControlRequestBytes <= 0 {
		cfg.MaxControlRequestBytes = 1 << 20
	}
	if cfg.MaxInflightBytes <= 0 {
		cfg.MaxInflightBytes = 256 << 20
	}
	if cfg.MaxInflatedBytes <= 0 {
		cfg.MaxInflatedBytes = 128 << 20
	}
	cfg.TopicDefaults = maps.Clone(cfg.TopicDefaults)
	if _, ok := cfg.TopicDefaults["max.message.bytes"]; !ok && cfg.MaxMessageBytes > 0 && cfg.MaxMessageBytes != 1048588 {
		if cfg.TopicDefaults == nil {
			cfg.TopicDefaults = topicconfig.Broker{}
		}
		cfg.TopicDefaults["max.message.bytes"] = strconv.Itoa(int(cfg.MaxMessageBytes))
	}
	if cfg.MaxPartitions <= 0 {
		cfg.MaxPartitions = 20000
	}
	if cfg.MaxPartitionsPerTopic <= 0 {
		cfg.MaxPartitionsPerTopic = 10000
	}
	if cfg.OffsetMetadataMaxBytes <= 0 {
		cfg.OffsetMetadataMaxBytes = 4096
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = 10000
	}
	if cfg.MaxConnectionsPerIP <= 0 {
		cfg.MaxConnectionsPerIP = 1000
	}
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.FetchMaxBytes <= 0 {
		cfg.FetchMaxBytes = 57671680
	}
	if cfg.MaxInflightFetchBytes <= 0 {
		cfg.MaxInflightFetchBytes = 256 << 20
	}
	if cfg.MaxFetchWait <= 0 {
		cfg.MaxFetchWait = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Producer ids are never reused across restarts: they start from the
	// clock in microseconds, past any id an earlier run handed out unless
	// that run issued more than a million ids a second or the clock went back.
	offsets := cfg.Offsets
	if offsets == nil {
		offsets = &memoryOffsets{}
	}
	srv := &Server{cfg: cfg, store: s, log: cfg.Logger,
		groups: newGroupServer(cfg.GroupInitialWait, cfg.GroupMaxRebalanceWait), offsets: offsets, closing: make(chan struct{}), open: map[net.Conn]bool{}, perIP: map[string]int{},
		inflight: newBudget(cfg.MaxInflightBytes), answers: newBudget(cfg.MaxInflightFetchBytes)}
	if cfg.Metrics != nil {
		srv.inflight.gauge = cfg.Metrics.setInflight
		srv.answers.gauge = cfg.Metrics.setAnswers
	}
	srv.cluster = cfg.Cluster
	if srv.cluster == nil {
		srv.cluster = metadata.NewSingle(s, nil, srv.listening)
	}
	srv.partitions = cfg.Partitions
	if srv.partitions == nil {
		srv.partitions = partition.New(s, partition.Config{Meta: srv.cluster, Log: cfg.Logger})
	}
	return srv
}

// listening is this node as Serve's listener reaches it (a single node's
// broker).
func (s *Server) listening() metadata.Broker {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	return metadata.Broker{NodeID: 0, Host: s.host, Port: s.port}
}

// Serve accepts connections until ln is closed.
func (s *Server) Serve(ln net.Listener) error {
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	s.openMu.Lock()
	s.ln = ln
	s.host, s.port = host, int32(p)
	select {
	case <-s.closing:
		// Shutdown came first and found no listener to close: Accept
		// would wait forever (goleak found it in the tests, whose
		// Serve goroutine can start after their Shutdown).
		s.openMu.Unlock()
		ln.Close()
		return nil
	default:
	}
	s.openMu.Unlock()
	backoff := time.Duration(0)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors or a connection reset before it was
			// taken: keep serving the connections there are, try again.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("kafka: accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-s.closing:
				return nil
			}
		}
		backoff = 0
		ip := remoteIP(c)
		s.openMu.Lock()
		if len(s.open) >= s.cfg.MaxConnections || s.perIP[ip] >= s.cfg.MaxConnectionsPerIP {
			total, fromIP := len(s.open), s.perIP[ip]
			s.openMu.Unlock()
			s.cfg.Metrics.refused("connections")
			s.log.Debug("kafka: refusing a connection over the limit", "remote", c.RemoteAddr().String(), "open", total, "from_ip", fromIP)
			c.Close()
			continue
		}
		s.conns.Add(1)
		s.open[c] = true
		s.perIP[ip]++
		s.openMu.Unlock()
		go func() {
			defer s.conns.Done()
			s.serveConn(c)
			s.openMu.Lock()
			delete(s.open, c)
			if s.perIP[ip]--; s.perIP[ip] == 0 {
				delete(s.perIP, ip)
			}
			s.openMu.Unlock()
		}()
	}
}

func remoteIP(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// Shutdown stops accepting and waits for connections to finish the request
// they are on (they are closed after it) or for ctx to end.
func (s *Server) Shutdown(ctx context.Context) {
	s.openMu.Lock()
	if s.ln != nil {
		s.ln.Close()
	}
	// Wake connections waiting for their next request; one in the middle
	// of a request finishes it and writes the answer first.
	s.closed.Do(func() { close(s.closing) })
	for c := range s.open {
		c.SetReadDeadline(time.Now())
	}
	s.openMu.Unlock()
	s.groups.close()
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// serveConn handles one client: requests one at a time, so responses go
// back in request order as Kafka requires.
func (s *Server) serveConn(c net.Conn) {
	defer c.Close()
	var lastRead atomic.Int64 // when c last delivered bytes: the in-flight budget evicts frames stalled under pressure
	r := bufio.NewReaderSize(readClock{c, &lastRead}, 64<<10)
	w := bufio.NewWriterSize(c, 64<<10)
	sess := s.newSession(c.RemoteAddr().String())
	ip := remoteIP(c)
	ra := &readAhead{}
	defer ra.close()
	for {
		if !s.penalties.wait(ip, s.closing) || !s.readDeadline(c, s.cfg.IdleTimeout) {
			return
		}
		var sizeBuf [4]byte
		if _, err := io.ReadFull(r, sizeBuf[:]); err != nil {
			return
		}
		size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
		// Before SASL authentication only ApiVersions and SASL frames of at
		// most 512 KiB are read, as Kafka's sasl.server.max.receive.size: a
		// stranger can make the broker decode nothing else.
		preAuth := sess.preAuth()
		maxSize := s.cfg.MaxRequestBytes
		if preAuth {
			maxSize = min(maxSize, maxPreAuthBytes)
		}
		if size < 8 || size > maxSize {
			s.refusal("kafka: refusing a frame", "remote", c.RemoteAddr().String(), "size", size, "max", maxSize, "authenticated", !preAuth)
			s.cfg.Metrics.refused("frame_size")
			return
		}
		// Once a frame has begun, its body must arrive promptly: a client
		// announcing a large frame and then trickling cannot hold memory.
		frameDeadline := time.Now().Add(s.cfg.FrameTimeout)
		if !s.readDeadlineAt(c, frameDeadline) {
			return
		}
		keyBytes, err := r.Peek(2)
		if err != nil {
			return
		}
		key := int16(binary.BigEndian.Uint16(keyBytes))
		if preAuth && !preAuthAPI(key) {
			s.refusal("kafka: closing a connection that sent a request before SASL authentication", "remote", c.RemoteAddr().String(),
				"api_key", key, "api", kmsg.NameForKey(key))
			s.cfg.Metrics.refused("unauthenticated")
			return
		}
		if key != produceKey && size > s.cfg.MaxControlRequestBytes {
			s.refusal("kafka: refusing a frame", "remote", c.RemoteAddr().String(), "api_key", key,
				"size", size, "max", s.cfg.MaxControlRequestBytes)
			s.cfg.Metrics.refused("frame_size")
			return
		}
		holder := &budgetHolder{lastRead: &lastRead, stall: func() {
			s.refusal("kafka: closing a connection whose frame stalled while holding in-flight bytes others wait for",
				"remote", c.RemoteAddr().String(), "api_key", key, "size", size)
			s.cfg.Metrics.refused("stalled_frame")
			c.Close()
		}}
		take := func(n, held, rest int) (int, error) {
			if preAuth {
				return n, nil // as Kafka's, pre-authentication frames are bounded by their own limit, not the shared budget
			}
			start := time.Now()
			got, err := s.inflight.takeFor(holder, s.closing, int64(n), int64(held), int64(rest))
			if waited := time.Since(start); err == nil && waited > time.Millisecond {
				// Waiting for room is not the client's slowness.
				frameDeadline = frameDeadline.Add(waited)
				if !s.readDeadlineAt(c, frameDeadline) {
					return int(got), errShuttingDown
				}
			}
			return int(got), err
		}
		frame, held, err := readFrame(r, int(size), take)
		s.inflight.done(holder)
		if preAuth {
			held = 0
		}
		if err != nil {
			s.inflight.release(int64(held))
			return
		}
		// Every request is watched: its context ends when the client goes
		// away, so a long poll, a JoinGroup waiting for its rebalance or a
		// produce waiting on the disk does not outlive it.
		ctx, stopWatch := watchClient(c, r)
		// The buffers the answer is built from go back once it is written.
		ctx, sc := withScratch(ctx)
		ctx = withReadAhead(ctx, ra)
		resp, err := s.handleFrame(ctx, frame, c.RemoteAddr().String(), sess)
		stopWatch()
		s.inflight.release(int64(held))
		if err != nil {
			sc.release()
			s.log.Warn("kafka: closing a connection after a bad request", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		if resp == nil {
			sc.release()
			continue // acks=0: Kafka sends no answer
		}
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		for _, part := range resp { // a large part goes to the connection without a copy
			if _, err := w.Write(part); err != nil {
				sc.release()
				return
			}
		}
		if err := w.Flush(); err != nil {
			sc.release()
			return
		}
		putBuf(resp[0]) // written: the next answers may reuse the buffers
		sc.release()
		ra.launch() // a fetch's read-ahead, now that its answer is on its way
		if sess.closeAfterAnswer() {
			return
		}
	}
}

// readClock notes when each read of a connection delivered bytes.
type readClock struct {
	net.Conn
	last *atomic.Int64
}

func (c readClock) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// readDeadline gives c's next read d, unless the server is shutting down.
func (s *Server) readDeadline(c net.Conn, d time.Duration) bool {
	return s.readDeadlineAt(c, time.Now().Add(d))
}

// readDeadlineAt sets c's read deadline unless the server is shutting
// down: under openMu, so Shutdown's wake-up deadline is never overwritten.
func (s *Server) readDeadlineAt(c net.Conn, t time.Time) bool {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	select {
	case <-s.closing:
		return false
	default:
	}
	c.SetReadDeadline(t)
	return true
}

// firstFrameBuf is what a larger frame's buffer starts with, once the
// reader's 64 KiB of it have come: twice what arrived, as every doubling
// after it.
const firstFrameBuf = 128 << 10

// readFrame reads a frame body of size bytes into a buffer that grows as
// the bytes arrive, never ahead of them: each growth is first had from
// take (n more bytes for a frame that holds held and needs at most rest
// more), which may grant more than asked. A client that announces a frame
// and stalls, or goes away, holds what it sent, at most twice over. It
// returns the frame and what take granted in all, also on an error.
func readFrame(r *bufio.Reader, size int, take func(n, held, rest int) (int, error)) ([]byte, int, error) {
	held := 0
	var buf []byte
	for len(buf) < size {
		if len(buf) == cap(buf) {
			// Nothing is taken or allocated until more of the body has come.
			if _, err := r.Peek(min(size-len(buf), r.Size())); err != nil {
				return nil, held, err
			}
			want := min(size, max(min(size, firstFrameBuf), 2*cap(buf)))
			if want > held {
				got, err := take(want-held, held, size-held)
				held += got
				if err != nil {
					return nil, held, err
				}
			}
			// Exactly want: a size class's rounding would read past what take granted.
			grown := make([]byte, len(buf), want)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), size)])
		buf = buf[:len(buf)+n]
		if err != nil && len(buf) < size {
			return nil, held, err
		}
	}
	return buf, held, nil
}

// handleFrame decodes one request frame and returns the whole response
// frame (size prefix included).
func (s *Server) handleFrame(ctx context.Context, frame []byte, remote string, sess *session) ([][]byte, error) {
	key := int16(binary.BigEndian.Uint16(frame))
	version := int16(binary.BigEndian.Uint16(frame[2:]))
	corr := int32(binary.BigEndian.Uint32(frame[4:]))
	req := kmsg.RequestForKey(key)
	if req == nil {
		return nil, fmt.Errorf("unknown API key %d", key)
	}
	body := frame[8:]
	// client id: nullable string
	if len(body) < 2 {
		return nil, errors.New("request header: missing client id")
	}
	cl := clientInfo{host: remote, ctx: ctx}
	if n := int16(binary.BigEndian.Uint16(body)); n > 0 {
		if int(n) > len(body)-2 {
			return nil, errors.New("request header: client id past the end")
		}
		cl.id = string(body[2 : 2+int(n)])
		body = body[2+int(n):]
	} else {
		body = body[2:]
	}
	req.SetVersion(version)
	supported, ok := supportedVersions[key]
	if key == apiVersionsKey && (!ok || version > supported.max) {
		// Answer with version 0 and UNSUPPORTED_VERSION so the client can retry lower.
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		s.fillVersions(resp)
		return frameResponse(corr, resp, false), nil
	}
	if !ok || version < supported.min || version > supported.max {
		return nil, fmt.Errorf("API key %d version %d is not supported", key, version)
	}
	if req.IsFlexible() {
		// tagged fields of the request header
		n, k := binary.Uvarint(body)
		if k <= 0 {
			return nil, errors.New("request header: bad tagged fields")
		}
		body = body[k:]
		for i := uint64(0); i < n; i++ {
			_, k1 := binary.Uvarint(body)
			if k1 <= 0 {
				return nil, errors.New("request header: bad tag")
			}
			l, k2 := binary.Uvarint(body[k1:])
			if k2 <= 0 || l > uint64(len(body)-k1-k2) {
				return nil, errors.New("request header: bad tag length")
			}
			body = body[k1+k2+int(l):]
		}
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("API key %d v%d: %w", key, version, err)
	}
	start := time.Now()
	resp, err := s.handleSession(sess, req, cl)
	if err != nil {
		return nil, err
	}
	s.penalize(remote, resp)
	s.cfg.Metrics.observe(req, resp, start)
	if p, ok := req.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
		return nil, nil
	}
	resp.SetVersion(version)
	dropUndefinedTags(resp)
	return frameResponse(corr, resp, resp.IsFlexible() && key != apiVersionsKey), nil
}

// dropUndefinedTags clears the tagged fields kmsg writes at every flexible
// version but Kafka defines only from a later one: kafka-clients refuses
// an answer with a tag its version does not define ("Tag 0 is not valid
// for version 9"). KIP-951's leader hints are Produce v10+ (the partition's
// CurrentLeader and NodeEndpoints) and Fetch v16+ (NodeEndpoints; Fetch's
// CurrentLeader is v12+, as kmsg writes it).
func dropUndefinedTags(resp kmsg.Response) {
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		if r.Version >= 10 {
			return
		}
		r.Brokers = nil
		for ti := range r.Topics {
			for pi := range r.Topics[ti].Partitions {
				l := &r.Topics[ti].Partitions[pi].CurrentLeader
				l.LeaderID, l.LeaderEpoch = -1, -1
			}
		}
	case *kmsg.FetchResponse:
		if r.Version < 16 {
			r.Brokers = nil
		}
	}
}

// frameResponse frames resp as the parts to write in turn: the whole frame,
// or, for a fetch answer, the frame around its large record batches and
// the batches themselves, written from their own buffers rather than
// copied into the frame (a fetch moves megabytes). kmsg encodes the answer
// with a marker in place of each large batch; the marker (random to this
// process, numbered) is then found in the encoding and cut out, and the
// batch's real length written where the marker's began. The first part
// starts the frame's buffer (handed back with putBuf once written).
func frameResponse(corr int32, resp kmsg.Response, flexibleHeader bool) [][]byte {
	size := 256
	f, isFetch := resp.(*kmsg.FetchResponse)
	var spliced []splice
	if isFetch {
		for ti := range f.Topics {
			size += len(f.Topics[ti].Topic) + 16
			for pi := range f.Topics[ti].Partitions {
				p := &f.Topics[ti].Partitions[pi]
				if len(p.RecordBatches) < minSpliced {
					size += len(p.RecordBatches) + 64
					continue
				}
				spliced = append(spliced, splice{p, p.RecordBatches})
				p.RecordBatches = spliceMarker(len(spliced) - 1)
				size += len(p.RecordBatches) + 64
			}
		}
	}
	var out []byte
	if size >= 1<<minPooledShift {
		out = getBuf(size)[:8] // handed back once written (serveConn)
	} else {
		out = make([]byte, 8, size)
	}
	binary.BigEndian.PutUint32(out[4:], uint32(corr))
	if flexibleHeader {
		out = append(out, 0) // no tagged fields
	}
	out = resp.AppendTo(out)
	for _, sp := range spliced {
		sp.p.RecordBatches = sp.batches
	}
	parts, ok := cutSplices(out, spliced, resp.IsFlexible())
	if !ok { // a marker not where kmsg puts a partition's batches: frame it whole
		return [][]byte{frameWhole(out[:8], flexibleHeader, resp)}
	}
	return parts
}

// minSpliced is the smallest record batches written from their own buffer:
// below it, copying them into the frame costs less than another write.
const minSpliced = 64 << 10

// splice is a fetch partition whose record batches are written apart.
type splice struct {
	p       *kmsg.FetchResponseTopicPartition
	batches []byte
}

// spliceSeed makes the markers unguessable, so no topic name or other
// field of an answer can pass for one.
var spliceSeed = func() (b [16]byte) {
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return b
}()

func spliceMarker(i int) []byte {
	return binary.BigEndian.AppendUint32(spliceSeed[:len(spliceSeed):len(spliceSeed)], uint32(i))
}

// cutSplices splits a framed answer at the markers of spliced, in order,
// into the frame's pieces and the batches between them, and sets the
// frame's size. Each marker must follow the length kmsg gave it (int32,
// or uvarint of length+1 in flexible versions).
func cutSplices(out []byte, spliced []splice, flexible bool) ([][]byte, bool) {
	parts := make([][]byte, 0, 2*len(spliced)+1)
	pos, total := 0, 0
	for i, sp := range spliced {
		marker := spliceMarker(i)
		pattern := append(lengthPrefix(nil, len(marker), flexible), marker...)
		at := bytes.Index(out[pos:], pattern)
		if at < 0 {
			return nil, false
		}
		at += pos
		// The batches' own length goes where the marker's began: it is at
		// most 5 bytes, the marker's place 20 and more.
		n := len(lengthPrefix(out[at:at], len(sp.batches), flexible))
		parts = append(parts, out[pos:at+n], sp.batches)
		total += at + n - pos + len(sp.batches)
		pos = at + len(pattern)
	}
	parts = append(parts, out[pos:])
	total += len(out) - pos
	binary.BigEndian.PutUint32(out, uint32(total-4))
	return parts, true
}

func lengthPrefix(dst []byte, n int, flexible bool) []byte {
	if flexible {
		return binary.AppendUvarint(dst, uint64(n)+1)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// frameWhole frames resp in one buffer, after head (size and correlation id).
func frameWhole(head []byte, flexibleHeader bool, resp kmsg.Response) []byte {
	out := append([]byte(nil), head...)
	if flexibleHeader {
		out = append(out, 0)
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}
