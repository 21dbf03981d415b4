"""Times Spark's SUM(price) GROUP BY item over a topic's typed column
beside the same query decoding each value's JSON from the raw value
column, over its Iceberg table by path (iceberg.catalog: hadoop), and
prints the figures as JSON (the last line) for BenchmarkSparkTypedAggregate
(typed_bench_test.go).

usage: typed_spark_bench.py JARS TABLE_DIR RUNS
  RUNS  timed runs of each query, after one untimed run of each
"""
import json
import statistics
import sys
import time

from typed_spark import session

jars, table, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = session(jars, "strata-bench-typed", cores=2)
spark.read.format("iceberg").load(table).createOrReplaceTempView("t")

TYPED = "SELECT value_typed.item AS item, sum(value_typed.price) AS total FROM t GROUP BY value_typed.item ORDER BY item"
# The registry's wire format: a zero byte and a 4-byte schema id, then the JSON.
JSON = ("SELECT get_json_object(CAST(substring(value, 6) AS STRING), '$.item') AS item, "
        "sum(CAST(get_json_object(CAST(substring(value, 6) AS STRING), '$.price') AS DOUBLE)) AS total "
        "FROM t GROUP BY 1 ORDER BY item")


def timed(q):
    rows = spark.sql(q).collect()  # untimed: the JVM's first run of the plan
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        rows = spark.sql(q).collect()
        times.append(time.perf_counter() - t0)
    return [(r.item, r.total) for r in rows], statistics.median(times)


typed_rows, typed_s = timed(TYPED)
json_rows, json_s = timed(JSON)
print(json.dumps({"rows": spark.sql("SELECT count(*) FROM t").collect()[0][0], "groups": len(typed_rows),
                  "same_answer": typed_rows == json_rows, "typed_seconds": typed_s, "json_seconds": json_s}))
