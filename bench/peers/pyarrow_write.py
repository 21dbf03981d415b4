"""Times pyarrow writing the records of a strata Parquet file to Parquet
again, on one core, with the settings strata writes with: the peer of
strata's conversion in `make bench` (parquet_test.go).

usage: pyarrow_write.py FILE RUNS
Prints JSON: seconds per run, output bytes, rows per row group, versions.
"""
import json
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

pa.set_cpu_count(1)
pa.set_io_thread_count(1)

path, runs = sys.argv[1], int(sys.argv[2])
pf = pq.ParquetFile(path)
table = pf.read()  # untimed: the records in Arrow's memory, as strata's are in Go's
rows_per_group = pf.metadata.row_group(0).num_rows
seconds, size = [], 0
for _ in range(runs):
    sink = pa.MockOutputStream()  # counts bytes; strata's side writes to a counter too
    start = time.perf_counter()
    # zstd level 1 is pyarrow's default and the level of strata's codec
    # (klauspost's SpeedFastest); row groups and the page index as strata
    # writes them; everything else is pyarrow's default (1 MiB pages,
    # dictionary encoding, statistics).
    pq.write_table(table, sink, compression="zstd", compression_level=1, row_group_size=rows_per_group,
                   write_page_index=True)
    seconds.append(time.perf_counter() - start)
    size = sink.size()
json.dump({"seconds": seconds, "bytes": size, "rows_per_group": rows_per_group,
           "pyarrow": pa.__version__}, sys.stdout)
