"""Times Spark's scan of topic orders' Iceberg table (through strata's REST
catalog) beside the same scan of the Hive layout over the same objects, and
a point query on offset through each, and prints the figures as JSON (the
last line) for BenchmarkSparkScan (icespark_bench_test.go).

usage: icespark_bench.py URI TOKEN JARS ROOT PARTITION POINT RUNS
  URI, TOKEN  the catalog (http://{admin_addr}/iceberg) and the admin token
  JARS        comma-separated: iceberg-spark-runtime and the rest of scripts/jars icespark
  ROOT        the cold tier's root as Spark opens it (file:///...): the Hive
              layout is ROOT/topic=orders/partition=N/*.parquet
  PARTITION, POINT  the point query: that partition's record at offset POINT
  RUNS        timed runs of each scan, after one untimed run of each
"""
import json
import statistics
import sys
import time

from pyspark.sql import SparkSession

uri, token, jars, root = sys.argv[1:5]
part, point, runs = map(int, sys.argv[5:8])
cat = "spark.sql.catalog.lake"
spark = (
    SparkSession.builder.master("local[2]")
    .appName("strata-bench-iceberg-scan")
    .config("spark.jars", jars)
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.sql.adaptive.enabled", "false")
    .config(cat, "org.apache.iceberg.spark.SparkCatalog")
    .config(cat + ".type", "rest")
    .config(cat + ".uri", uri)
    .config(cat + ".token", token)
    # Each run plans afresh: no cached table between the runs.
    .config(cat + ".cache-enabled", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")

hive = spark.read.parquet(root + "/topic=orders")  # partition=N from the paths
hive.createOrReplaceTempView("hive_orders")
tables = {"iceberg": "lake.strata.orders", "hive": "hive_orders"}
# Every column read, so neither side answers from metadata alone.
scan = ("SELECT partition, count(*) AS n, max(`offset`) AS hi, sum(length(value)) AS vb, sum(length(key)) AS kb, "
        "sum(size(headers)) AS h, max(timestamp) AS ts FROM {t} GROUP BY partition ORDER BY partition")


def scan_metrics(df):
    """The leaf scans' metrics of df's plan as run, summed by name."""
    out = {}
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves()
    for i in range(leaves.size()):
        it = leaves.apply(i).metrics().iterator()
        while it.hasNext():
            kv = it.next()
            out[kv._1()] = out.get(kv._1(), 0) + kv._2().value()
    return out


out = {"runs": runs}
answers = {}
for name, t in tables.items():
    answers[name] = [list(r) for r in spark.sql(scan.format(t=t)).collect()]  # the untimed run
out["same_answer"] = [[str(v) for v in r] for r in answers["iceberg"]] == [[str(v) for v in r] for r in answers["hive"]]
out["records"] = sum(r[1] for r in answers["iceberg"])
times = {name: [] for name in tables}
for _ in range(runs):  # alternating, so both see the same machine
    for name, t in tables.items():
        began = time.perf_counter()
        spark.sql(scan.format(t=t)).collect()
        times[name].append(time.perf_counter() - began)
for name in tables:
    out[name + "_scan_seconds"] = statistics.median(times[name])

for name, t in tables.items():
    df = spark.sql(f"SELECT `offset`, value FROM {t} WHERE partition = {part} AND `offset` = {point}")
    rows = df.collect()
    m = scan_metrics(df)
    out[name + "_point_rows"] = len(rows)
    # Iceberg's scan says the data files it planned and their bytes; the
    # Hive layout's file scan the files it read and their size.
    out[name + "_point_files"] = m.get("resultDataFiles", m.get("numFiles", -1))
    out[name + "_point_bytes"] = m.get("totalDataFileSize", m.get("filesSize", -1))
    out[name + "_metrics"] = sorted(m)
print(json.dumps(out))
