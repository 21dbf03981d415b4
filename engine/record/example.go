package record

// DocExample is the record docs/format.md dumps byte by byte.
var DocExample = Record{
	Offset:       42,
	Timestamp:    1764460800000, // 2025-11-30T00:00:00Z
	Key:          []byte("k1"),
	Value:        []byte("hello"),
	Headers:      []Header{{Key: "h", Value: []byte("v")}},
	Tags:         []string{"eu"},
	ProtocolData: []byte{0x01},
}
