package parquet

import (
	"fmt"
	"strings"
)

// HiveDDL is the CREATE EXTERNAL TABLE statement that lets Hive (or Spark SQL
// with Hive support) query one topic's objects at location, the topic's
// folder ({prefix}/topic={topic}). Partitions are found by
// MSCK REPAIR TABLE. The columns are listed in format 2's order; Hive
// matches Parquet columns by name, so format-1 objects read the same.
func HiveDDL(table, location string) string {
	return fmt.Sprintf("CREATE EXTERNAL TABLE IF NOT EXISTS `%s` (\n"+
		"  `offset` BIGINT,\n"+
		"  `timestamp` TIMESTAMP,\n"+
		"  `key` BINARY,\n"+
		"  `headers` ARRAY<STRUCT<`key`: STRING, `value`: BINARY>>,\n"+
		"  `tags` ARRAY<STRING>,\n"+
		"  `protocol_data` BINARY,\n"+
		"  `value` BINARY\n"+
		")\nPARTITIONED BY (`partition` INT)\nSTORED AS PARQUET\nLOCATION '%s'",
		TableName(table), strings.ReplaceAll(location, "'", "\\'"))
}

// TableName turns a topic name into a Hive table name: letters, digits and
// underscores.
func TableName(topic string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, topic)
}
