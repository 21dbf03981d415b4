//go:build cgo && !purezstd

package parquet

import (
	"sync"

	cz "github.com/DataDog/zstd"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// zstdImpl names the zstd encoder in use (logged and shown by tests).
const zstdImpl = "libzstd (cgo)"

// newZstd is the reference C library at level 1, Arrow's default: the
// profile of a conversion gave two thirds of its time to Go's pure
// encoder, and C compresses the same pages about 1.7x faster into the
// same frames. Build with -tags purezstd (or CGO_ENABLED=0) for Go's.
func newZstd() compress.Codec { return &cgoZstd{} }

type cgoZstd struct {
	ctxs sync.Pool // of cz.Ctx: a compression context is ~1 MiB of tables, kept warm between pages
	dec  zstd.Codec
}

func (c *cgoZstd) String() string                            { return "ZSTD" }
func (c *cgoZstd) CompressionCodec() format.CompressionCodec { return format.Zstd }

func (c *cgoZstd) Encode(dst, src []byte) ([]byte, error) {
	ctx, _ := c.ctxs.Get().(cz.Ctx)
	if ctx == nil {
		ctx = cz.NewCtx()
	}
	defer c.ctxs.Put(ctx)
	return ctx.CompressLevel(dst[:0], src, 1)
}

// Decode is Go's: the writer never decodes, and readers pick their codec
// from the file, not from here.
func (c *cgoZstd) Decode(dst, src []byte) ([]byte, error) { return c.dec.Decode(dst, src) }
