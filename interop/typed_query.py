"""Reads a topic's typed columns by field name, as an analyst would
(interop/typed_test.go): DuckDB over the tiered objects themselves, and,
over the topic's Iceberg table (iceberg.catalog: hadoop, no catalog),
pyiceberg and DuckDB's iceberg extension.

Usage: typed_query.py COLD_DIR TOPIC VERSION  (VERSION 2: the schemas have discount)

Prints, as its last line, a JSON report: for each reader, every row's
offset, typed fields and error, and a GROUP BY over the typed columns; the
table's data files (path and size) and the field ids its schema gives the
typed columns.
"""

import glob
import json
import os
import sys

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
from pyiceberg.table import StaticTable

cold, topic, version = sys.argv[1], sys.argv[2], int(sys.argv[3])
table_dir = f"{cold}/topic={topic}/_iceberg"
with open(f"{table_dir}/metadata/version-hint.text") as f:
    current = f"{table_dir}/metadata/v{f.read().strip()}.metadata.json"

discount = "value_typed.discount" if version == 2 else "NULL::DOUBLE"
ROWS = ('SELECT "offset", value_typed.id, value_typed.item, value_typed.price, value_typed.tags, '
        f'{discount}, value_typed_error, octet_length(value) FROM {{src}} ORDER BY "offset"')
GROUPS = (f"SELECT value_typed.item, count(*), sum(value_typed.price), sum({discount}) FROM {{src}} "
          "WHERE value_typed IS NOT NULL GROUP BY value_typed.item ORDER BY 1")


def read(con, src):
    rows = con.sql(ROWS.format(src=src)).fetchall()
    groups = con.sql(GROUPS.format(src=src)).fetchall()
    return {
        "rows": [{"offset": r[0], "id": r[1], "item": r[2], "price": r[3], "tags": r[4], "discount": r[5],
                  "error": r[6], "value_bytes": r[7]} for r in rows],
        "groups": [{"item": g[0], "count": g[1], "sum": g[2], "discount": g[3]} for g in groups],
    }


def extension(module, name):
    return glob.glob(os.path.join(os.path.dirname(module.__file__), "extensions", "*", name + ".duckdb_extension"))[0]


out = {}
con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
# The objects: value_typed.discount is in the newer ones only.
out["duckdb_parquet"] = read(con, f"read_parquet('{cold}/topic={topic}/**/*.parquet', hive_partitioning = true, union_by_name = true)")

table = StaticTable.from_metadata(current)
scanned = table.scan().to_arrow()  # pyiceberg's own read, by field id
out["pyiceberg"] = read(con, "scanned")
out["files"] = sorted([os.path.basename(t.file.file_path), t.file.file_size_in_bytes] for t in table.scan().plan_files())
schema = table.schema()


def field_id(name):
    try:
        return schema.find_field(name).field_id
    except ValueError:
        return None


out["ids"] = {n: field_id(n) for n in ["value_typed", "value_typed.id", "value_typed.discount", "value_typed_error"]}

# DuckDB cannot download extensions here: the PyPI packages carry them.
con.sql(f"LOAD '{extension(duckdb_extension_avro, 'avro')}'")
con.sql(f"LOAD '{extension(duckdb_extension_iceberg, 'iceberg')}'")
out["duckdb_iceberg"] = read(con, f"iceberg_scan('{current}')")
print(json.dumps(out))
