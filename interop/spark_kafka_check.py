"""Reads a topic of strata through Spark's Kafka source (local mode) and
prints what it found as JSON for spark_kafka_test.go.

usage: spark_kafka_check.py BOOTSTRAP TOPIC BY_TIMESTAMP_JSON
  BY_TIMESTAMP_JSON  startingOffsetsByTimestamp for the second query, e.g.
                     {"orders": {"0": 1700000000500, "1": 1700000001500}}

The environment names the jars of the Kafka source: KAFKA_JARS
(comma-separated: spark-sql-kafka-0-10, its token provider, kafka-clients,
commons-pool2).

Output: {"records": [[partition, offset, key_hex, value_hex,
timestamp_ms, timestamp_type, [[header_key, header_value_hex], ...]], ...],
"by_timestamp": {"PARTITION": [first_offset, count], ...}}
"""
import json
import os
import sys

from pyspark.sql import SparkSession

bootstrap, topic, by_timestamp = sys.argv[1:4]
spark = (
    SparkSession.builder.master("local[1]")
    .appName("strata-kafka-interop")
    .config("spark.jars", os.environ["KAFKA_JARS"])
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.session.timeZone", "UTC")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def read(**options):
    r = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("endingOffsets", "latest")
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


# Everything: the cold (older) offsets and the hot ones in one query.
rows = (
    read(startingOffsets="earliest")
    .selectExpr(
        "partition",
        "offset",
        "lower(hex(key)) AS key",
        "lower(hex(value)) AS value",
        "unix_millis(timestamp) AS ts",
        "timestampType",
        "transform(headers, h -> array(h.key, lower(hex(h.value)))) AS headers",
    )
    .orderBy("partition", "offset")
    .collect()
)
out = {"records": [[r.partition, r.offset, r.key, r.value, r.ts, r.timestampType, r.headers] for r in rows]}

# From the first offset at or after a time per partition, as ListOffsets
# answers it.
rows = (
    read(startingOffsetsByTimestamp=by_timestamp)
    .groupBy("partition")
    .agg({"offset": "min", "*": "count"})
    .withColumnRenamed("min(offset)", "first")
    .withColumnRenamed("count(1)", "n")
    .collect()
)
out["by_timestamp"] = {str(r.partition): [r.first, r.n] for r in rows}
print(json.dumps(out))
spark.stop()
