"""Reads topic orders' Iceberg table through strata's REST catalog, with
pyiceberg and with DuckDB's iceberg extension, on MinIO, and prints what
each found as JSON for icerest_test.go.

usage: icerest_check.py URI TOKEN ENDPOINT ACCESS SECRET PARTITION POINT LO HI
  URI                 the catalog, http://{admin_addr}/iceberg
  TOKEN               the admin token (the REST spec's `token`)
  ENDPOINT, ACCESS, SECRET  MinIO, for the data files (the catalog vends no keys)
  PARTITION, POINT, LO, HI  the filters: that partition, offset POINT, offsets LO..HI
"""
import glob
import json
import os
import sys

import duckdb
import duckdb_extension_avro
import duckdb_extension_httpfs
import duckdb_extension_iceberg
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThanOrEqual

from iceberg_check import records


def extension(module, name):
    return glob.glob(os.path.join(os.path.dirname(module.__file__), "extensions", "*", name + ".duckdb_extension"))[0]


def main():
    uri, token, endpoint, access, secret = sys.argv[1:6]
    part, point, lo, hi = map(int, sys.argv[6:10])
    out = {}

    # The reader brings its own keys to MinIO; the endpoint, path style and
    # region come from the catalog's LoadTable answer.
    cat = load_catalog("strata", type="rest", uri=uri, token=token,
                       **{"s3.access-key-id": access, "s3.secret-access-key": secret})
    out["namespaces"] = [list(ns) for ns in cat.list_namespaces()]
    out["tables"] = [".".join(t) for t in cat.list_tables("strata")]
    t = cat.load_table("strata.orders")
    out["metadata_location"] = t.metadata_location
    out["pyiceberg"] = records(t.scan().to_arrow())
    scan = t.scan(row_filter=And(EqualTo("partition", part), GreaterThanOrEqual("offset", lo), LessThanOrEqual("offset", hi)))
    out["pyiceberg_files"] = sorted(os.path.basename(task.file.file_path) for task in scan.plan_files())
    out["pyiceberg_range"] = sorted([r["partition"], r["offset"]] for r in scan.to_arrow().select(["partition", "offset"]).to_pylist())
    out["snapshots"] = [{"id": s.snapshot_id, "offsets": {k: v for k, v in s.summary.additional_properties.items() if k.startswith("strata.offsets.")}}
                        for s in t.snapshots()]
    try:
        cat.drop_table("strata.orders")
        out["drop"] = "dropped"
    except Exception as e:  # the catalog refuses: strata owns the table
        out["drop"] = f"{type(e).__name__}: {e}"

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for module, name in [(duckdb_extension_avro, "avro"), (duckdb_extension_httpfs, "httpfs"), (duckdb_extension_iceberg, "iceberg")]:
        con.sql(f"LOAD '{extension(module, name)}'")
    con.sql(f"""CREATE SECRET minio (TYPE S3, KEY_ID '{access}', SECRET '{secret}', ENDPOINT '{endpoint}',
                URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')""")
    con.sql(f"CREATE SECRET strata_catalog (TYPE iceberg, TOKEN '{token}')")
    # The catalog vends no keys (iceberg.rest.vend_credentials off): DuckDB
    # reads the files with its own S3 secret, not the LoadTable config's.
    con.sql(f"ATTACH 'strata' AS lake (TYPE iceberg, SECRET strata_catalog, ENDPOINT '{uri}', ACCESS_DELEGATION_MODE 'none')")
    out["duckdb_tables"] = [r[0] for r in con.sql("SELECT table_name FROM information_schema.tables WHERE table_catalog = 'lake' ORDER BY 1").fetchall()]
    out["duckdb"] = records(con.sql("SELECT * FROM lake.strata.orders").to_arrow_table())
    out["duckdb_point"] = [list(r) for r in con.sql(
        f'SELECT partition, "offset" FROM lake.strata.orders WHERE partition = {part} AND "offset" = {point}').fetchall()]
    json.dump(out, sys.stdout)


main()
