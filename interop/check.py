"""Reads what strata exported with pyarrow and DuckDB and prints what it found
as JSON, for interop_test.go to compare with what was produced.

usage: check.py local DIR | check.py s3 ENDPOINT ACCESS SECRET BUCKET/PREFIX
"""
import json
import sys

import pyarrow.fs as pafs
import pyarrow.parquet as pq

EXPECTED_COLUMNS = ["offset", "timestamp", "key", "value", "headers", "tags", "protocol_data"]


def read_all(fs, root):
    files = sorted(
        f.path for f in fs.get_file_info(pafs.FileSelector(root, recursive=True))
        if f.path.endswith(".parquet")
    )
    records = {}
    for path in files:
        table = pq.read_table(path, filesystem=fs)
        if table.schema.names != EXPECTED_COLUMNS:
            raise SystemExit(f"{path}: columns {table.schema.names}")
        if str(table.schema.field("timestamp").type) != "timestamp[ms, tz=UTC]":
            raise SystemExit(f"{path}: timestamp type {table.schema.field('timestamp').type}")
        part = [p for p in path.split("/") if p.startswith("partition=")][0].split("=")[1]
        topic = [p for p in path.split("/") if p.startswith("topic=")][0].split("=")[1]
        rows = table.to_pylist()
        millis = table["timestamp"].cast("int64").to_pylist()  # exact, unlike float seconds
        for r, ms in zip(rows, millis):
            r["timestamp_ms"] = ms
        for a, b in zip(rows, rows[1:]):
            if b["offset"] != a["offset"] + 1:
                raise SystemExit(f"{path}: offsets not contiguous at {a['offset']}")
        for r in rows:
            records.setdefault(f"{topic}-{part}", []).append({
                "offset": r["offset"],
                "timestamp_ms": r["timestamp_ms"],
                "key": None if r["key"] is None else r["key"].hex(),
                "value": None if r["value"] is None else r["value"].hex(),
                "headers": [[h["key"], None if h["value"] is None else h["value"].hex()] for h in r["headers"]],
            })
    return files, records


def main():
    mode = sys.argv[1]
    out = {}
    if mode == "local":
        root = sys.argv[2]
        files, out["pyarrow"] = read_all(pafs.LocalFileSystem(), root)
        import duckdb
        rows = duckdb.sql(
            f"""SELECT topic, partition, count(*), min("offset"), max("offset"),
                       epoch_ms(min(timestamp)), epoch_ms(max(timestamp))
                FROM read_parquet('{root}/**/*.parquet', hive_partitioning = true)
                GROUP BY topic, partition ORDER BY topic, partition"""
        ).fetchall()
        out["duckdb"] = [list(map(lambda v: v if isinstance(v, (int, str)) else int(v), r)) for r in rows]
    else:
        endpoint, access, secret, root = sys.argv[2:6]
        fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key=access,
                               secret_key=secret, region="us-east-1")
        files, out["pyarrow"] = read_all(fs, root)
    out["files"] = len(files)
    json.dump(out, sys.stdout)


main()
