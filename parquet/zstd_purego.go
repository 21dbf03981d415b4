//go:build !cgo || purezstd

package parquet

import (
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

const zstdImpl = "klauspost/compress (pure Go)"

// newZstd is Go's encoder at its fastest level, about zstd level 1
// (Arrow's default); level 3 made conversion about a third slower for
// files 1% smaller (bench/peers).
func newZstd() compress.Codec { return &zstd.Codec{Level: zstd.SpeedFastest} }
