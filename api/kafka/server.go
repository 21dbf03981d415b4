// Package kafka is strata's Kafka wire front end: it reads request frames,
// decodes them with franz-go's kmsg, answers through the storage API, and
// writes the responses back in order. Produce unpacks record batches into
// protocol-neutral records; Fetch reframes stored records into uncompressed
// v2 batches (seed 000).
package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/store"
)

// Config tunes the front end.
type Config struct {
	// AutoCreateTopics creates a topic on first use (Metadata allowing it,
	// or Produce), with DefaultPartitions partitions.
	AutoCreateTopics  bool
	DefaultPartitions int32
	// MaxRequestBytes refuses larger frames (100 MiB).
	MaxRequestBytes int32
	// IdleTimeout closes connections silent for this long (10m).
	IdleTimeout time.Duration
	// MaxFetchWait caps a fetch's long poll, whatever the client asks (30s).
	MaxFetchWait time.Duration
	// Offsets keeps consumer groups' committed offsets; nil keeps them in
	// memory (tests).
	Offsets *Offsets
	// GroupInitialWait is how long a new group's first rebalance waits for
	// more members (300ms; Kafka's group.initial.rebalance.delay.ms).
	GroupInitialWait time.Duration
	// GroupMaxRebalanceWait caps how long a rebalance waits for members to
	// rejoin, whatever timeout they ask for (5m).
	GroupMaxRebalanceWait time.Duration
	// Metrics, if set, counts requests and errors.
	Metrics *Metrics
	Logger  *slog.Logger
	// Auth, if set, requires SASL authentication and checks permissions
	// (auth.go).
	Auth *Auth
}

// Server answers Kafka clients from a store.
type Server struct {
	cfg   Config
	store store.Store
	log   *slog.Logger

	host string
	port int32

	mu      sync.Mutex
	nextPID int64
	seqs    *sequences // idempotent producers' recent batches
	groups  *coordinator
	offsets *Offsets
	closing chan struct{} // closed by Shutdown: long polls end
	closed  sync.Once

	conns  sync.WaitGroup
	ln     net.Listener
	open   map[net.Conn]bool
	openMu sync.Mutex // guards ln, host, port and open
}

// New makes a server over s.
func New(s store.Store, cfg Config) *Server {
	if cfg.DefaultPartitions <= 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 100 << 20
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
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
		var err error
		if offsets, err = OpenOffsets(""); err != nil {
			panic(err) // an in-memory Pebble does not fail to open
		}
	}
	return &Server{cfg: cfg, store: s, log: cfg.Logger, nextPID: time.Now().UnixMicro(), seqs: newSequences(),
		groups: newCoordinator(cfg.GroupInitialWait, cfg.GroupMaxRebalanceWait), offsets: offsets, closing: make(chan struct{}), open: map[net.Conn]bool{}}
}

// Serve accepts connections until ln is closed.
func (s *Server) Serve(ln net.Listener) error {
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	s.openMu.Lock()
	s.ln = ln
	s.host, s.port = host, int32(p)
	s.openMu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		s.conns.Add(1)
		s.openMu.Lock()
		s.open[c] = true
		s.openMu.Unlock()
		go func() {
			defer s.conns.Done()
			s.serveConn(c)
			s.openMu.Lock()
			delete(s.open, c)
			s.openMu.Unlock()
		}()
	}
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
	for c := range s.open {
		c.SetReadDeadline(time.Now())
	}
	s.openMu.Unlock()
	s.closed.Do(func() { close(s.closing) })
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
	r := bufio.NewReaderSize(c, 64<<10)
	w := bufio.NewWriterSize(c, 64<<10)
	sess := s.newSession(c.RemoteAddr().String())
	for {
		c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		var sizeBuf [4]byte
		if _, err := io.ReadFull(r, sizeBuf[:]); err != nil {
			return
		}
		size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
		if size < 8 || size > s.cfg.MaxRequestBytes {
			s.log.Warn("kafka: refusing a frame", "remote", c.RemoteAddr().String(), "size", size, "max", s.cfg.MaxRequestBytes)
			return
		}
		frame := make([]byte, size)
		if _, err := io.ReadFull(r, frame); err != nil {
			return
		}
		resp, err := s.handleFrame(frame, c.RemoteAddr().String(), sess)
		if err != nil {
			s.log.Warn("kafka: closing a connection after a bad request", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		if resp == nil {
			continue // acks=0: Kafka sends no answer
		}
		c.SetWriteDeadline(time.Now().Add(time.Minute))
		if _, err := w.Write(resp); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
		if sess.closeAfterAnswer() {
			return
		}
	}
}

// handleFrame decodes one request frame and returns the whole response
// frame (size prefix included).
func (s *Server) handleFrame(frame []byte, remote string, sess *session) ([]byte, error) {
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
	cl := clientInfo{host: remote}
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
		resp.ErrorCode = errUnsupportedVersion
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
	s.cfg.Metrics.observe(req, resp, start)
	if p, ok := req.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
		return nil, nil
	}
	resp.SetVersion(version)
	return frameResponse(corr, resp, resp.IsFlexible() && key != apiVersionsKey), nil
}

func frameResponse(corr int32, resp kmsg.Response, flexibleHeader bool) []byte {
	size := 256
	if f, ok := resp.(*kmsg.FetchResponse); ok { // megabytes of records: allocate once
		for _, t := range f.Topics {
			size += len(t.Topic) + 16
			for _, p := range t.Partitions {
				size += len(p.RecordBatches) + 64
			}
		}
	}
	out := make([]byte, 8, size)
	binary.BigEndian.PutUint32(out[4:], uint32(corr))
	if flexibleHeader {
		out = append(out, 0) // no tagged fields
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}
