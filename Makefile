# strata: the two commands a newcomer needs are `make run` and `make test`.
GO ?= go

.PHONY: build run test unit fuzz bench soak services services-down clean

build:
	$(GO) build -o bin/strata ./cmd/strata

# The service on its embedded default: local disk, local-folder cold tier.
run: build
	./bin/strata serve

# Everything, with real MinIO, HDFS and etcd started (and stopped) by scripts/services.
test:
	scripts/test

# Every test once, quickly: no -race, no vet, no fuzzing. Services start on
# demand (scripts/services) and keep running; `make services-down` stops them.
unit:
	$(GO) test ./...

# Every fuzz target, briefly (FUZZTIME each).
fuzz:
	scripts/fuzz

# Every benchmark, beside its reference; writes bench/results.json.
bench:
	scripts/bench

# The randomized workload (cmd/strata TestWorkload) for SOAK_TIME (30m) with
# a fresh seed, printed as "workload seed=N"; STRATA_WORKLOAD_SEED=N replays.
# Then the long run (bench/curves TestSoak): produce at half the top rate for
# SOAK_TIME with tiering every minute; its p99 and RSS over time go to
# bench/soak.jsonl and are drawn in bench/charts/soak-*.svg. Then the
# cluster fault harness (cluster/e2e TestClusterHarness) for SOAK_TIME, its
# default fault mix unless STRATA_HARNESS_FAULTS says otherwise, printed as
# "cluster harness seed=N"; STRATA_HARNESS_SEED=N replays.
SOAK_TIME ?= 30m
soak:
	STRATA_WORKLOAD_TIME=$(SOAK_TIME) $(GO) test -count=1 -timeout 90m -run 'TestWorkload$$' -v ./cmd/strata/
	STRATA_SOAK_TIME=$(SOAK_TIME) STRATA_SOAK_OUT=$(CURDIR)/bench/soak.jsonl $(GO) test -count=1 -timeout 90m -run 'TestSoak$$' -v ./bench/curves/
	"$$(scripts/pyenv)" bench/report.py soak bench/soak.jsonl bench/charts
	STRATA_HARNESS_TIME=$(SOAK_TIME) $(GO) test -count=1 -timeout 90m -run 'TestClusterHarness$$' -v ./cluster/e2e/

services:
	scripts/services up

services-down:
	scripts/services down

clean:
	rm -rf bin
