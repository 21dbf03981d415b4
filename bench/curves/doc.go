// Package curves holds the benchmarks of how strata's costs grow (issue
// #15, item 2): with partitions, with the history a shard keeps, and with
// record size. Each is a curve: every point is reported with bench.Report
// with its Curve, Series and X set, and bench/report.py draws each curve as
// bench/charts/<curve>.svg. The long run (make soak) is here too, as a
// test that runs for STRATA_SOAK_TIME (a minute in make test). docs/bench.md says
// what each measures and against what.
package curves
