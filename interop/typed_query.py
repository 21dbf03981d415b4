"""Reads the typed columns of tiered objects with DuckDB, by field name,
as an analyst would (interop/typed_test.go).

Usage: typed_query.py COLD_DIR TOPIC

Prints, as its last line, a JSON report: every row's offset and typed
fields and error, and a GROUP BY over the typed columns.
"""

import json
import sys

import duckdb

cold, topic = sys.argv[1:3]
src = f"read_parquet('{cold}/topic={topic}/**/*.parquet', hive_partitioning = true)"
rows = duckdb.sql(f'SELECT "offset", value_typed.id, value_typed.item, value_typed.price, value_typed.tags, '
                  f'value_typed_error, octet_length(value) FROM {src} ORDER BY "offset"').fetchall()
groups = duckdb.sql(f"SELECT value_typed.item, count(*), sum(value_typed.price) FROM {src} "
                    f"WHERE value_typed IS NOT NULL GROUP BY value_typed.item ORDER BY 1").fetchall()
print(json.dumps({
    "rows": [{"offset": r[0], "id": r[1], "item": r[2], "price": r[3], "tags": r[4], "error": r[5], "value_bytes": r[6]} for r in rows],
    "groups": [{"item": g[0], "count": g[1], "sum": g[2]} for g in groups],
}))
