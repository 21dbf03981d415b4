"""Queries topics' typed columns with Spark (local mode) and Iceberg's Spark
runtime, each topic's table by its path (iceberg.catalog: hadoop; Iceberg's
HadoopTables), for interop/typed_test.go.

usage: typed_spark.py JARS COLD_DIR TOPIC...
  JARS  comma-separated: iceberg-spark-runtime and what it needs

Prints, as its last line, JSON: by topic, SUM(value_typed.price) and
SUM(value_typed.discount) GROUP BY value_typed.item, and how many rows
have a discount.
"""
import json
import sys

from pyspark.sql import SparkSession


def session(jars, app, cores=1):
    """A local Spark with Iceberg's runtime on 127.0.0.1 (typed_spark_bench.py uses it too)."""
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main():
    jars, cold, topics = sys.argv[1], sys.argv[2], sys.argv[3:]
    spark = session(jars, "strata-interop-typed")
    out = {}
    for topic in topics:
        spark.read.format("iceberg").load(f"{cold}/topic={topic}/_iceberg").createOrReplaceTempView("t")
        groups = spark.sql(
            "SELECT value_typed.item AS item, count(*) AS n, sum(value_typed.price) AS price, sum(value_typed.discount) AS discount "
            "FROM t WHERE value_typed IS NOT NULL GROUP BY value_typed.item ORDER BY item").collect()
        discounted = spark.sql("SELECT count(*) FROM t WHERE value_typed.discount IS NOT NULL").collect()[0][0]
        out[topic] = {"groups": [{"item": g.item, "count": g.n, "sum": g.price, "discount": g.discount} for g in groups],
                      "discounted": discounted}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
