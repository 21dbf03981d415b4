"""Reads a topic's Iceberg table, as strata's tiering committed it, with
pyiceberg and with DuckDB's iceberg extension, straight from its metadata
(no catalog), and prints what each found as JSON for iceberg_test.go.

usage: iceberg_check.py TABLE_DIR PARTITION LO HI FROM_MS TO_MS
  TABLE_DIR   the table's folder ({cold}/topic={topic}/_iceberg)
  PARTITION, LO, HI  pyiceberg's row filter: that partition, offsets LO..HI
  FROM_MS, TO_MS     DuckDB's filter: timestamps FROM_MS..TO_MS (milliseconds)
"""
import glob
import json
import os
import sys

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
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
    table_dir = sys.argv[1]
    part, lo, hi, from_ms, to_ms = map(int, sys.argv[2:7])
    out = {}
    # The pointer names the current metadata; a reader without a catalog
    # opens that file.
    with open(os.path.join(table_dir, "metadata", "version-hint.text")) as f:
        current = os.path.join(table_dir, "metadata", f.read().strip() + ".metadata.json")
    out["metadata"] = current

    t = StaticTable.from_metadata(current)
    out["pyiceberg"] = records(t.scan().to_arrow())
    scan = t.scan(row_filter=And(EqualTo("partition", part), GreaterThanOrEqual("offset", lo), LessThanOrEqual("offset", hi)))
    out["pyiceberg_files"] = sorted(os.path.basename(task.file.file_path) for task in scan.plan_files())
    out["pyiceberg_range"] = [[r["partition"], r["offset"]] for r in sorted(scan.to_arrow().select(["partition", "offset"]).to_pylist(), key=lambda r: r["offset"])]
    out["summary"] = {k: v for k, v in t.current_snapshot().summary.additional_properties.items() if k.startswith("strata.")}

    # DuckDB cannot download extensions here: the PyPI packages carry them.
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.sql(f"LOAD '{extension(duckdb_extension_avro, 'avro')}'")
    con.sql(f"LOAD '{extension(duckdb_extension_iceberg, 'iceberg')}'")
    out["duckdb"] = records(con.sql(f"SELECT * FROM iceberg_scan('{current}')").to_arrow_table())
    # The table's folder: DuckDB follows version-hint.text itself.
    con.sql("SET TimeZone = 'UTC'")
    rows = con.sql(
        f"""SELECT partition, "offset", epoch_ms(timestamp) FROM iceberg_scan('{table_dir}')
            WHERE timestamp BETWEEN epoch_ms({from_ms})::TIMESTAMPTZ AND epoch_ms({to_ms})::TIMESTAMPTZ
            ORDER BY partition, "offset" """
    ).fetchall()
    out["duckdb_range"] = [[int(v) for v in r] for r in rows]
    json.dump(out, sys.stdout)


main()
