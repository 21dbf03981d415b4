// Package icetable keeps one Iceberg table per topic over the Parquet
// objects tiering has already written: each tiered object becomes a data
// file of its topic's table, committed exactly once, and no record is
// copied. The planner (plan.go, pure) says which objects the next commit
// adds, from the table's current snapshot and the bucket's manifests; the
// rest writes the table's metadata through strata's object store with
// apache/iceberg-go. docs/iceberg.md has the whole picture.
package icetable

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/iceberg-go"
)

// Column names, as docs/parquet.md's schema has them. The objects carry no
// Iceberg field ids: readers find columns by the table's name mapping
// (schema.name-mapping.default), which iceberg-go writes from Schema.
const (
	ColOffset       = "offset"
	ColTimestamp    = "timestamp"
	ColKey          = "key"
	ColHeaders      = "headers"
	ColTags         = "tags"
	ColProtocolData = "protocol_data"
	ColValue        = "value"
	// ColPartition is not in the objects: a reader takes it from each data
	// file's partition value (an identity partition), as the Hive layout
	// takes it from the path. It is optional in the schema, though never
	// null: pyiceberg 0.12 fills a column missing from a file from the
	// partition value only if the column is optional, and refuses a
	// required one.
	ColPartition = "partition"
)

// Schema is the Iceberg schema of the Parquet view, numbered as Iceberg
// numbers a new table's columns (table.NewMetadata renumbers them so too).
// A table's own schema is the truth for its ids: fieldIDs reads them.
func Schema() *iceberg.Schema {
	s, err := iceberg.AssignFreshSchemaIDs(iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: ColOffset, Type: iceberg.PrimitiveTypes.Int64, Required: true},
		// Microseconds in Iceberg; the objects hold milliseconds
		// (TIMESTAMP(MILLIS, UTC)), which readers widen.
		iceberg.NestedField{ID: 2, Name: ColTimestamp, Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 3, Name: ColKey, Type: iceberg.PrimitiveTypes.Binary},
		iceberg.NestedField{ID: 4, Name: ColHeaders, Required: true, Type: &iceberg.ListType{
			ElementID: 9, ElementRequired: true,
			Element: &iceberg.StructType{FieldList: []iceberg.NestedField{
				{ID: 10, Name: "key", Type: iceberg.PrimitiveTypes.String, Required: true},
				{ID: 11, Name: "value", Type: iceberg.PrimitiveTypes.Binary},
			}},
		}},
		iceberg.NestedField{ID: 5, Name: ColTags, Required: true, Type: &iceberg.ListType{
			ElementID: 12, ElementRequired: true, Element: iceberg.PrimitiveTypes.String,
		}},
		iceberg.NestedField{ID: 6, Name: ColProtocolData, Type: iceberg.PrimitiveTypes.Binary},
		iceberg.NestedField{ID: 7, Name: ColValue, Type: iceberg.PrimitiveTypes.Binary},
		iceberg.NestedField{ID: 8, Name: ColPartition, Type: iceberg.PrimitiveTypes.Int32},
	), nil)
	if err != nil {
		panic(err) // a fixed schema: fails every test or none
	}
	return s
}

// Spec partitions a topic's table by Kafka partition (identity), so a reader
// prunes by partition before it reads a manifest's file entries.
func Spec() iceberg.PartitionSpec {
	f, _ := Schema().FindFieldByName(ColPartition)
	return iceberg.NewPartitionSpec(iceberg.PartitionField{
		SourceIDs: []int{f.ID}, FieldID: 1000, Name: ColPartition, Transform: iceberg.IdentityTransform{},
	})
}

// ids are the field ids a data file's bounds and partition value name.
type ids struct{ offset, timestamp, partition, partitionField int }

// fieldIDs reads them from a table's schema and partition spec.
func fieldIDs(s *iceberg.Schema, spec iceberg.PartitionSpec) (ids, error) {
	var out ids
	for _, c := range []struct {
		name string
		id   *int
	}{{ColOffset, &out.offset}, {ColTimestamp, &out.timestamp}, {ColPartition, &out.partition}} {
		f, ok := s.FindFieldByName(c.name)
		if !ok {
			return ids{}, fmt.Errorf("the table's schema has no column %s", c.name)
		}
		*c.id = f.ID
	}
	if spec.NumFields() != 1 || spec.Field(0).SourceID() != out.partition {
		return ids{}, fmt.Errorf("the table is not partitioned by %s alone: %v", ColPartition, spec)
	}
	out.partitionField = spec.Field(0).FieldID
	return out, nil
}

// Bounds are Iceberg's single-value serialisation: little-endian, a long
// or a timestamp in 8 bytes, an int in 4.
func longBound(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
func intBound(v int32) []byte  { return binary.LittleEndian.AppendUint32(nil, uint32(v)) }
