"""Times pyarrow writing the records of a strata Parquet file to Parquet
again, on one core, with the settings strata writes with: the peer of
strata's conversion in `make bench` (parquet_test.go).

usage: pyarrow_write.py FILE RUNS PAGE_BYTES
Prints JSON: seconds per run (wall clock and this process's CPU time),
output bytes, rows per row group, versions.
"""
import json
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq

pa.set_cpu_count(1)
pa.set_io_thread_count(1)

path, runs, page_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pf = pq.ParquetFile(path)
table = pf.read()  # untimed: the records in Arrow's memory, as strata's are in Go's
rows_per_group = pf.metadata.row_group(0).num_rows
seconds, cpu_seconds, size = [], [], 0
for _ in range(runs):
    sink = pa.MockOutputStream()  # counts bytes; strata's side writes to a counter too
    start, cpu_start = time.perf_counter(), time.process_time()
    # zstd level 1 is pyarrow's default and the level of strata's codec
    # (libzstd's level 1); row groups, page size and the page index as
    # strata writes them; everything else is pyarrow's default. Its
    # dictionary encoding keeps each row group's distinct values in one
    # dictionary page, compressed whole, whatever data_page_size says
    # (docs/bench.md, "The page size").
    pq.write_table(table, sink, compression="zstd", compression_level=1, row_group_size=rows_per_group,
                   data_page_size=page_bytes, write_page_index=True)
    seconds.append(time.perf_counter() - start)
    cpu_seconds.append(time.process_time() - cpu_start)
    size = sink.size()
json.dump({"seconds": seconds, "cpu_seconds": cpu_seconds, "bytes": size, "rows_per_group": rows_per_group,
           "pyarrow": pa.__version__}, sys.stdout)
