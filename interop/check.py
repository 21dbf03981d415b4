"""Reads what strata exported with pyarrow and DuckDB and prints what it found
as JSON, for interop_test.go to compare with what was produced.

usage: check.py local DIR FROM_MS TO_MS | check.py s3 ENDPOINT ACCESS SECRET BUCKET/PREFIX
  FROM_MS, TO_MS  the timestamps (milliseconds, both included) DuckDB's range query keeps
"""
import json
import sys

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

# The schema docs/parquet.md documents, as Arrow sees it.
EXPECTED_SCHEMA = pa.schema([
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("headers", pa.list_(pa.field("element", pa.struct([
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.binary()),
    ]), nullable=False)), nullable=False),
    pa.field("tags", pa.list_(pa.field("element", pa.string(), nullable=False)), nullable=False),
    pa.field("protocol_data", pa.binary()),
    pa.field("value", pa.binary()),  # last since format 2: see docs/parquet.md
])
FOOTER_KEYS = [b"strata.format_version", b"strata.first_offset", b"strata.last_offset", b"strata.shard",
               b"strata.segment", b"strata.segment_crc32c", b"strata.segment_records"]


def read_all(fs, root):
    files = sorted(
        f.path for f in fs.get_file_info(pafs.FileSelector(root, recursive=True))
        if f.path.endswith(".parquet")
    )
    records = {}
    for path in files:
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            meta = pf.metadata
            table = pf.read()
        if not table.schema.equals(EXPECTED_SCHEMA, check_metadata=False):
            raise SystemExit(f"{path}: schema\n{table.schema}\nwant\n{EXPECTED_SCHEMA}")
        kv = meta.metadata or {}
        missing = [k.decode() for k in FOOTER_KEYS if k not in kv]
        if missing:
            raise SystemExit(f"{path}: footer lacks {missing}")
        offsets = table["offset"].to_pylist()
        if (int(kv[b"strata.first_offset"]), int(kv[b"strata.last_offset"])) != (offsets[0], offsets[-1]):
            raise SystemExit(f"{path}: footer says offsets {kv[b'strata.first_offset']}..{kv[b'strata.last_offset']}, "
                             f"rows hold {offsets[0]}..{offsets[-1]}")
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                col = meta.row_group(g).column(c)
                if col.compression != "ZSTD" or not col.has_offset_index or not col.has_column_index:
                    raise SystemExit(f"{path}: row group {g} column {col.path_in_schema}: codec {col.compression}, "
                                     f"offset index {col.has_offset_index}, column index {col.has_column_index}")
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
        # A range on timestamp, which DuckDB pushes into the scan to skip row
        # groups by their statistics: a wrong bound loses rows. The bounds
        # are of the column's type (TIMESTAMPTZ, the column being UTC), and
        # UTC is the session's zone, so no cast lands on the column.
        duckdb.sql("SET TimeZone = 'UTC'")
        lo, hi = int(sys.argv[3]), int(sys.argv[4])
        rows = duckdb.sql(
            f"""SELECT partition, "offset", epoch_ms(timestamp)
                FROM read_parquet('{root}/**/*.parquet', hive_partitioning = true)
                WHERE timestamp BETWEEN epoch_ms({lo})::TIMESTAMPTZ AND epoch_ms({hi})::TIMESTAMPTZ
                ORDER BY partition, "offset"
            """
        ).fetchall()
        out["duckdb_range"] = [[int(v) for v in r] for r in rows]
    else:
        endpoint, access, secret, root = sys.argv[2:6]
        fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key=access,
                               secret_key=secret, region="us-east-1")
        files, out["pyarrow"] = read_all(fs, root)
    out["files"] = len(files)
    json.dump(out, sys.stdout)


main()
