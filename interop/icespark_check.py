"""Reads topic orders' Iceberg table through strata's REST catalog with
Spark (local mode) and Iceberg's Spark runtime, the files on MinIO through
Iceberg's S3FileIO, and prints what it found as JSON (the last line) for
icerest_test.go.

Then, given a JDBC URI, it reads the same table through the Iceberg SQL
catalog strata commits to (Iceberg's JdbcCatalog, named "jdbc" here, as
strata's iceberg.catalog_name), the files through S3FileIO too, and prints
that catalog's answers under "jdbc".

usage: icespark_check.py URI TOKEN ACCESS SECRET JARS PARTITION POINT LO HI [JDBC_URI]
  URI, TOKEN      the catalog (http://{admin_addr}/iceberg) and the admin token
  ACCESS, SECRET  the reader's own MinIO keys (the endpoint, path style and
                  region come from the catalog's LoadTable answer)
  JARS            comma-separated: iceberg-spark-runtime, iceberg-aws-bundle, JDBC drivers
  S3_ENDPOINT (env)  MinIO's, for the SQL catalog, which has no LoadTable answer
                  to hand it over; unset, the files are on HDFS
  WAREHOUSE (env)   the SQL catalog's warehouse, which it wants though unused
  HADOOP_TABLE (env)  the table's folder (iceberg.catalog: hadoop): read by path
                  too, as Iceberg's Hadoop tables, and printed under "path"
  PARTITION, POINT, LO, HI  the filters: offset POINT and offsets LO..HI of PARTITION
"""
import json
import os
import sys

from pyspark.sql import SparkSession

uri, token, access, secret, jars = sys.argv[1:6]
part, point, lo, hi = map(int, sys.argv[6:10])
jdbc_uri = sys.argv[10] if len(sys.argv) > 10 else ""
# On MinIO the files are read with S3FileIO; without S3_ENDPOINT they are
# on HDFS, which Iceberg's default file IO (HadoopFileIO) reads as it is.
s3 = "S3_ENDPOINT" in os.environ


def s3_conf(builder, cat, endpoint=True):
    if not s3:
        return builder
    builder = (
        builder.config(cat + ".io-impl", "org.apache.iceberg.aws.s3.S3FileIO")
        .config(cat + ".s3.access-key-id", access)
        .config(cat + ".s3.secret-access-key", secret)
    )
    if endpoint:  # the REST catalog's LoadTable answer hands these over
        builder = (
            builder.config(cat + ".s3.endpoint", os.environ["S3_ENDPOINT"])
            .config(cat + ".s3.path-style-access", "true")
            .config(cat + ".client.region", "us-east-1")
        )
    return builder


cat = "spark.sql.catalog.lake"
builder = (
    SparkSession.builder.master("local[1]")
    .appName("strata-interop-iceberg")
    .config("spark.jars", jars)
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.session.timeZone", "UTC")
    # The scan's own metrics (data files planned) on the plan as run.
    .config("spark.sql.adaptive.enabled", "false")
    .config(cat, "org.apache.iceberg.spark.SparkCatalog")
    .config(cat + ".type", "rest")
    .config(cat + ".uri", uri)
    .config(cat + ".token", token)
)
builder = s3_conf(builder, cat, endpoint=False)
if jdbc_uri:
    jcat = "spark.sql.catalog.jdbc"
    builder = (
        builder
        # java.sql.DriverManager finds a driver on the JVM's own class path only.
        .config("spark.driver.extraClassPath", jars.replace(",", ":"))
        .config(jcat, "org.apache.iceberg.spark.SparkCatalog")
        .config(jcat + ".type", "jdbc")
        .config(jcat + ".uri", jdbc_uri)
        # Required, though strata's tables name their own locations.
        .config(jcat + ".warehouse", os.environ["WAREHOUSE"])
        .config(jcat + ".jdbc.schema-version", "V1")
    )
    builder = s3_conf(builder, jcat)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")


def scanned_files(df):
    """The data files the Iceberg scan of df's plan read (its resultDataFiles metric)."""
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    total = 0
    for i in range(leaves.size()):
        m = leaves.apply(i).metrics()
        if m.contains("resultDataFiles"):
            total += m.apply("resultDataFiles").value()
    return total


def rows(df):
    return [[r.partition, r.offset, r.ts, r.k, r.v] for r in df.collect()]


cols = "partition, `offset`, unix_millis(timestamp) AS ts, lower(hex(key)) AS k, lower(hex(value)) AS v"


def check(c):
    """What catalog c's table of topic orders reads."""
    t = f"{c}.strata.orders"
    out = {}
    out["namespaces"] = [r[0] for r in spark.sql(f"SHOW NAMESPACES IN {c}").collect()]
    out["tables"] = [r.tableName for r in spark.sql(f"SHOW TABLES IN {c}.strata").collect()]
    return reads(out, t, lambda m: f"{t}.{m}", lambda snap: f"{t} VERSION AS OF {snap}")


def check_path(loc):
    """What the Hadoop-style table at loc reads, by path (Iceberg's HadoopTables)."""
    def src():  # a reader's options stay with it: a new one each time
        return spark.read.format("iceberg")

    src().load(loc).createOrReplaceTempView("by_path")

    def meta(m):
        src().load(f"{loc}#{m}").createOrReplaceTempView(f"by_path_{m}")
        return f"by_path_{m}"

    def as_of(snap):
        src().option("versionAsOf", snap).load(loc).createOrReplaceTempView("by_path_as_of")
        return "by_path_as_of"

    return reads({}, "by_path", meta, as_of)


def reads(out, t, meta, as_of):
    """The scans and filters of table t (SQL), its metadata table m as meta(m), snapshot s as as_of(s)."""
    out["files"] = spark.sql(f"SELECT count(*) FROM {meta('files')}").collect()[0][0]
    out["scan"] = [[r.partition, r.n, r.lo, r.hi, r.value_bytes] for r in spark.sql(
        "SELECT partition, count(*) AS n, min(`offset`) AS lo, max(`offset`) AS hi, sum(length(value)) AS value_bytes "
        f"FROM {t} GROUP BY partition ORDER BY partition").collect()]
    df = spark.sql(f"SELECT {cols} FROM {t} WHERE partition = {part} AND `offset` = {point}")
    out["point"], out["point_files"] = rows(df), scanned_files(df)
    df = spark.sql(f"SELECT {cols} FROM {t} WHERE partition = {part} AND `offset` BETWEEN {lo} AND {hi} ORDER BY `offset`")
    out["range"], out["range_files"] = rows(df), scanned_files(df)
    # Rows, not a count: Iceberg answers count(*) from the manifests alone.
    df = spark.sql(f"SELECT {cols} FROM {t} WHERE partition = {part}")
    df.collect()
    out["partition_files"] = scanned_files(df)

    snaps = spark.sql(f"SELECT snapshot_id, summary FROM {meta('snapshots')} ORDER BY committed_at").collect()
    out["snapshots"] = [{"id": s.snapshot_id, "offsets": {k: v for k, v in s.summary.items() if k.startswith("strata.offsets.")}} for s in snaps]
    first = snaps[0].snapshot_id
    out["first"] = [[r.partition, r.n, r.hi] for r in spark.sql(
        f"SELECT partition, count(*) AS n, max(`offset`) AS hi FROM {as_of(first)} "
        "GROUP BY partition ORDER BY partition").collect()]
    return out


out = check("lake")
if jdbc_uri:
    out["jdbc"] = check("jdbc")
if "HADOOP_TABLE" in os.environ:
    out["path"] = check_path(os.environ["HADOOP_TABLE"])
    # The same table through Iceberg's HadoopCatalog over the cold tier's
    # root: a namespace per topic folder, the table its _iceberg folder.
    hcat = "spark.sql.catalog.hadoop"
    spark.conf.set(hcat, "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(hcat + ".type", "hadoop")
    spark.conf.set(hcat + ".warehouse", os.environ["HADOOP_TABLE"].removesuffix("/topic=orders/_iceberg"))
    t = "hadoop.`topic=orders`._iceberg"
    out["hadoop_catalog"] = reads({}, t, lambda m: f"{t}.{m}", lambda snap: f"{t} VERSION AS OF {snap}")
try:
    spark.sql("DROP TABLE lake.strata.orders")
    out["drop"] = "dropped"
except Exception as e:  # the catalog refuses: strata owns the table
    out["drop"] = str(e).splitlines()[0]
print(json.dumps(out))
