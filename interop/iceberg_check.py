"""Reads a topic's Iceberg table, as strata's tiering committed it, with
pyiceberg and with DuckDB's iceberg extension, straight from its metadata
(no catalog), and prints what each found as JSON for iceberg_test.go.

usage: iceberg_check.py local TABLE_DIR PARTITION LO HI FROM_MS TO_MS
       iceberg_check.py sqlite CATALOG_FILE PARTITION LO HI FROM_MS TO_MS
       iceberg_check.py s3 ENDPOINT ACCESS SECRET TABLE_URI PARTITION LO HI FROM_MS TO_MS
  TABLE_DIR, TABLE_URI  the table's folder ({cold}/topic={topic}/_iceberg; s3://bucket/prefix/... on MinIO)
  CATALOG_FILE  the Iceberg SQL catalog strata commits to (iceberg.catalog=sqlite:FILE,
                iceberg.catalog_name=strata): pyiceberg's SqlCatalog finds the table there
  PARTITION, LO, HI  pyiceberg's row filter: that partition, offsets LO..HI
  FROM_MS, TO_MS     DuckDB's filter: timestamps FROM_MS..TO_MS (milliseconds)
"""
import glob
import json
import os
import sys

import duckdb
import duckdb_extension_avro
import duckdb_extension_httpfs
import duckdb_extension_iceberg
import pyarrow.fs as pafs
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThanOrEqual
from pyiceberg.table import StaticTable


def records(table):
    """The rows of an Arrow table as check.py prints them, by shard."""
    out = {}
    millis = (table["timestamp"].cast("int64").to_pylist())  # microseconds since the epoch
    for r, us in zip(table.to_pylist(), millis):
        out.setdefault(f"orders-{r['partition']}", []).append({
            "offset": r["offset"],
            "timestamp_ms": us // 1000,
            "key": None if r["key"] is None else r["key"].hex(),
            "value": None if r["value"] is None else r["value"].hex(),
            "headers": [[h["key"], None if h["value"] is None else h["value"].hex()] for h in r["headers"]],
        })
    for recs in out.values():
        recs.sort(key=lambda r: r["offset"])
    return out


def extension(module, name):
    return glob.glob(os.path.join(os.path.dirname(module.__file__), "extensions", "*", name + ".duckdb_extension"))[0]


def main():
    props = {}
    table_dir = None
    if sys.argv[1] == "sqlite":
        from pyiceberg.catalog.sql import SqlCatalog
        cat = SqlCatalog("strata", uri="sqlite:///" + sys.argv[2])
        current = cat.load_table("strata.orders").metadata_location
        args = sys.argv[3:]
    elif sys.argv[1] == "local":
        table_dir = sys.argv[2]
        args = sys.argv[3:]
        with open(os.path.join(table_dir, "metadata", "version-hint.text")) as f:
            stem = f.read().strip()
    else:
        endpoint, access, secret, table_dir = sys.argv[2:6]
        args = sys.argv[6:]
        props = {"s3.endpoint": "http://" + endpoint, "s3.access-key-id": access, "s3.secret-access-key": secret,
                 "s3.region": "us-east-1", "s3.force-virtual-addressing": "false"}
        fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key=access, secret_key=secret,
                               region="us-east-1")
        with fs.open_input_stream(table_dir.removeprefix("s3://") + "/metadata/version-hint.text") as f:
            stem = f.read().decode().strip()
    part, lo, hi, from_ms, to_ms = map(int, args)
    out = {}
    if table_dir is not None:
        # The pointer names the current metadata; a reader without a
        # catalog opens that file.
        current = table_dir + "/metadata/" + stem + ".metadata.json"
    out["metadata"] = current

    t = StaticTable.from_metadata(current, properties=props)
    out["pyiceberg"] = records(t.scan().to_arrow())
    scan = t.scan(row_filter=And(EqualTo("partition", part), GreaterThanOrEqual("offset", lo), LessThanOrEqual("offset", hi)))
    out["pyiceberg_files"] = sorted(os.path.basename(task.file.file_path) for task in scan.plan_files())
    out["pyiceberg_range"] = [[r["partition"], r["offset"]] for r in sorted(scan.to_arrow().select(["partition", "offset"]).to_pylist(), key=lambda r: r["offset"])]
    out["summary"] = {k: v for k, v in t.current_snapshot().summary.additional_properties.items() if k.startswith("strata.")}

    # DuckDB cannot download extensions here: the PyPI packages carry them.
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.sql(f"LOAD '{extension(duckdb_extension_avro, 'avro')}'")
    con.sql(f"LOAD '{extension(duckdb_extension_iceberg, 'iceberg')}'")
    if props:
        con.sql(f"LOAD '{extension(duckdb_extension_httpfs, 'httpfs')}'")
        con.sql(f"""CREATE SECRET minio (TYPE S3, KEY_ID '{access}', SECRET '{secret}', ENDPOINT '{endpoint}',
                    URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')""")
    out["duckdb"] = records(con.sql(f"SELECT * FROM iceberg_scan('{current}')").to_arrow_table())
    # The table's folder: DuckDB follows version-hint.text itself (the
    # bucket's pointer; a SQL catalog's table has none).
    con.sql("SET TimeZone = 'UTC'")
    rows = con.sql(
        f"""SELECT partition, "offset", epoch_ms(timestamp) FROM iceberg_scan('{table_dir or current}')
            WHERE timestamp BETWEEN epoch_ms({from_ms})::TIMESTAMPTZ AND epoch_ms({to_ms})::TIMESTAMPTZ
            ORDER BY partition, "offset" """
    ).fetchall()
    out["duckdb_range"] = [[int(v) for v in r] for r in rows]
    json.dump(out, sys.stdout)


if __name__ == "__main__":  # icerest_check.py imports records
    main()
