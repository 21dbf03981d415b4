"""Reads strata's export with Spark (local mode) and runs the Hive DDL strata
prints, then prints what it found as JSON for interop_test.go.

usage: spark_check.py ROOT_URI TOPIC_URI DDL_FILE WORKDIR OFFSET LO HI
  ROOT_URI   folder holding topic=*/partition=*/ (file://, hdfs:// or s3a://)
  TOPIC_URI  the topic's folder, the Hive table's location
  OFFSET     the offset a point query filters on
  LO, HI     the offsets a range query filters on (both included)

For s3a://, the environment names the store and the jars that read it:
  S3A_JARS (comma-separated: hadoop-aws and the AWS SDK), S3_ENDPOINT
  (host:port, plain HTTP), S3_ACCESS_KEY, S3_SECRET_KEY.
"""
import json
import os
import sys

from pyspark.sql import SparkSession

root, topic_uri, ddl_file, work = sys.argv[1:5]
point, lo, hi = map(int, sys.argv[5:8])
builder = SparkSession.builder
if root.startswith("s3a://"):
    env = os.environ
    builder = (
        builder.config("spark.jars", env["S3A_JARS"])
        .config("spark.hadoop.fs.s3a.endpoint", "http://" + env["S3_ENDPOINT"])
        .config("spark.hadoop.fs.s3a.endpoint.region", "us-east-1")
        .config("spark.hadoop.fs.s3a.path.style.access", "true")
        .config("spark.hadoop.fs.s3a.connection.ssl.enabled", "false")
        .config("spark.hadoop.fs.s3a.access.key", env["S3_ACCESS_KEY"])
        .config("spark.hadoop.fs.s3a.secret.key", env["S3_SECRET_KEY"])
        .config("spark.hadoop.fs.s3a.aws.credentials.provider",
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    )
spark = (
    builder.master("local[1]")
    .appName("strata-interop")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={work}")
    .config("javax.jdo.option.ConnectionURL", f"jdbc:derby:;databaseName={os.path.join(work, 'metastore')};create=true")
    .enableHiveSupport()
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
out = {}

df = spark.read.option("basePath", root).parquet(root)
out["columns"] = df.columns
rows = spark.sql(
    "SELECT topic, partition, count(*) AS n, min(`offset`) AS lo, max(`offset`) AS hi, "
    "sum(length(value)) AS value_bytes FROM parquet.`%s` GROUP BY topic, partition ORDER BY topic, partition" % root
).collect()
out["scan"] = [[r.topic, r.partition, r.n, r.lo, r.hi, r.value_bytes] for r in rows]

# Filters on offset: Spark pushes them into parquet-mr, which skips row
# groups by the footer's statistics and pages by the column index, then
# reads the other columns' pages the offset index says hold the rows left.
# A bound that does not bound, or a first row index one off, loses rows or
# pairs an offset with another record's value.
FILTERED = ("SELECT `partition`, `offset`, unix_millis(timestamp) AS ms, lower(hex(key)) AS key, "
            "lower(hex(value)) AS value FROM parquet.`%s` WHERE %s ORDER BY `partition`, `offset`")
for name, where in [("point", f"`offset` = {point}"), ("range", f"`offset` BETWEEN {lo} AND {hi}")]:
    rows = spark.sql(FILTERED % (root, where)).collect()
    out[name] = [[r.partition, r.offset, r.ms, r.key, r.value] for r in rows]

spark.sql(open(ddl_file).read().rstrip().rstrip(";"))
table = open(ddl_file).read().split("`")[1]
spark.sql(f"MSCK REPAIR TABLE `{table}`")
rows = spark.sql(
    f"SELECT `partition`, count(*) AS n, max(`offset`) AS hi FROM `{table}` GROUP BY `partition` ORDER BY `partition`"
).collect()
out["hive"] = [[r.partition, r.n, r.hi] for r in rows]
print(json.dumps(out))
spark.stop()
