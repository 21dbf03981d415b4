// Package peers measures strata beside what its users would otherwise run,
// in the same `make bench` run: Apache Kafka (KRaft, one node) under the same
// franz-go load, and pyarrow writing the same records to Parquet.
package peers
