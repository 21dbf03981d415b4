package tiering

import (
	"io"
	"sync"
)

// aheadPipe is io.Pipe with a bounded buffer: the converter writes into it
// while the uploader is busy sending a part. With io.Pipe a writer waits
// for every read, and an S3 upload reads only between parts, so conversion
// and upload took turns instead of overlapping (the tier figure was the
// sum of both times). Memory: at most ahead bytes plus two chunks.
type aheadPipe struct {
	chunks chan []byte   // full chunks, in order
	free   chan []byte   // emptied chunks, for reuse
	done   chan struct{} // closed when the reader gives up
	once   sync.Once
	rerr   error // why the reader gave up; set before done closes
	werr   error // why the writer stopped; set before chunks closes

	cur  []byte // the writer's chunk being filled
	rd   []byte // what is left of the reader's chunk
	held []byte // the reader's whole chunk, recycled once read
	size int
}

const pipeChunk = 1 << 20

func newAheadPipe(ahead int) *aheadPipe {
	n := max(1, ahead/pipeChunk)
	return &aheadPipe{chunks: make(chan []byte, n), free: make(chan []byte, n+2), done: make(chan struct{}), size: pipeChunk}
}

// Write copies p into the buffer, waiting only while it is full.
func (p *aheadPipe) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		if p.cur == nil {
			select {
			case p.cur = <-p.free:
				p.cur = p.cur[:0]
			default:
				p.cur = make([]byte, 0, p.size)
			}
		}
		n := copy(p.cur[len(p.cur):cap(p.cur)], b)
		p.cur = p.cur[:len(p.cur)+n]
		b, written = b[n:], written+n
		if len(p.cur) == cap(p.cur) {
			if err := p.send(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (p *aheadPipe) send() error {
	select {
	case p.chunks <- p.cur:
		p.cur = nil
		return nil
	case <-p.done:
		return p.rerr
	}
}

// CloseWithError ends the stream for the reader after what was written:
// io.EOF for a nil err, else err. Called once, by the writer.
func (p *aheadPipe) CloseWithError(err error) {
	if len(p.cur) > 0 && err == nil {
		if serr := p.send(); serr != nil {
			err = serr
		}
	}
	if err == nil {
		err = io.EOF
	}
	p.werr = err
	close(p.chunks)
}

// Read returns buffered bytes, waiting for the writer when there are none.
func (p *aheadPipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if len(p.rd) == 0 {
		if p.held != nil {
			select {
			case p.free <- p.held:
			default:
			}
			p.held = nil
		}
		c, ok := <-p.chunks
		if !ok {
			return 0, p.werr
		}
		p.rd, p.held = c, c
	}
	n := copy(b, p.rd)
	p.rd = p.rd[n:]
	return n, nil
}

// CloseReader stops the writer: its next write (or the one waiting) fails
// with err (io.ErrClosedPipe for nil).
func (p *aheadPipe) CloseReader(err error) {
	p.once.Do(func() {
		if err == nil {
			err = io.ErrClosedPipe
		}
		p.rerr = err
		close(p.done)
	})
}
