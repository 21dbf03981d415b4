// Package configs holds the example configurations; dev.yaml is also the
// embedded default that every other file is read on top of.
package configs

import _ "embed"

//go:embed dev.yaml
var Default []byte
