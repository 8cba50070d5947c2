# The two set-up commands are `make run` and `make test`; both install what
# is missing (scripts/install-deps.sh, Debian packages only) and build first.
# `make bench` builds the benchmarks in their own Release tree and runs them.

BUILD_DIR  ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
LISTEN     ?= 127.0.0.1:8787
GATEWAY    ?= 127.0.0.1:8788
DATA_DIR   ?= ./kvgov-data
BENCH_DIR  ?= build-bench
# Benchmarks left out of `make bench`: the 10 M-block recovery and memory
# cases take minutes and gigabytes, so they run only on purpose.
BENCH_FILTER ?= -TenMillion
# CI builds treat warnings as errors.
WERROR     := $(if $(CI),ON,OFF)

.PHONY: all deps configure build test tidy test-asan soak soak-replicas bench bench-10m bench-smoke bench-build run serve clean fuzz-build fuzz fuzz-smoke image image-test faults

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DKVGOV_WERROR=$(WERROR) > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@bash scripts/install-node-test-deps.sh
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# clang-tidy over every source file of src/ with the build's own flags
# (tests/tidy_check.sh, .clang-tidy): about nine minutes of two cores, so
# not part of `make test`; CI runs it.
tidy: build
	@bash tests/tidy_check.sh . $(BUILD_DIR)

bench: bench-build
	@bash scripts/run-benchmarks.sh $(BENCH_DIR) '$(BENCH_FILTER)'

# The 10 M-block cases alone (restart, memory, recovery): minutes and a few
# GiB, with the same summary.
bench-10m: bench-build
	@bash scripts/run-benchmarks.sh $(BENCH_DIR) 'TenMillion'

# Every case of every benchmark binary once, at its smallest size, and the
# summary `make bench` prints (scripts/run-benchmarks.sh --smoke): so CI
# sees a benchmark that no longer runs. A minute or two.
bench-smoke: bench-build
	@bash scripts/run-benchmarks.sh --smoke $(BENCH_DIR)

bench-build: deps
	@bash scripts/install-deps.sh --bench
	@cmake -S . -B $(BENCH_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DKVGOV_BUILD_BENCHMARKS=ON -DKVGOV_BUILD_TESTS=OFF -DKVGOV_WERROR=$(WERROR) \
	  > $(BENCH_DIR).configure.log 2>&1 \
	  || { cat $(BENCH_DIR).configure.log; exit 1; }
	@cmake --build $(BENCH_DIR) -j $(JOBS)

# The OCI image, from Debian's packages alone (deploy/image/build.sh; takes
# a minute and Debian's archive, so not part of `make test`), and the test
# that runs its entrypoint from the unpacked filesystem (tests/image).
IMAGE_DIR ?= build-image
image: build
	@bash scripts/install-deps.sh --image
	@bash deploy/image/build.sh --binary $(BUILD_DIR)/apps/kvgov/kvgov --out $(IMAGE_DIR)

image-test: image
	@python3 tests/image/image_test.py $(IMAGE_DIR)/kvgov.oci.tar

# The fault matrix (tests/faults/matrix.tsv): every row's tests, and the
# table in docs/reliability.md written from what happened.
faults: build
	@KVGOV_VOLUME_SCALE=1000000 python3 tests/faults/run_matrix.py --build $(BUILD_DIR) --run \
	  --doc docs/reliability.md

# The demo: kvgov on $(LISTEN) with a simulated vLLM fleet attached, an agent
# workload routed through it, then kvgov keeps serving until Ctrl-C.
run: build
	$(BUILD_DIR)/apps/kvgov/kvgov demo --listen $(LISTEN) --gateway-listen $(GATEWAY) --data-dir $(DATA_DIR)

# kvgov alone, following the engines you give it (ENGINES="--engine ...").
serve: build
	$(BUILD_DIR)/apps/kvgov/kvgov serve --listen $(LISTEN) --data-dir $(DATA_DIR) $(ENGINES)

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer
# (LeakSanitizer included), any report fatal. CI runs it after `make test`.
# ASan holds freed memory in a quarantine (256 MiB by default) that grows
# RSS by itself; the soak test checks RSS stays flat, so the quarantine is
# 32 MiB here (leaks are LeakSanitizer's to find).
ASAN_DIR ?= build-asan
test-asan: deps
	@cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DKVGOV_SANITIZE=address,undefined -DKVGOV_WERROR=$(WERROR) \
	  > $(ASAN_DIR).configure.log 2>&1 || { cat $(ASAN_DIR).configure.log; exit 1; }
	@cmake --build $(ASAN_DIR) -j $(JOBS)
	@bash scripts/install-node-test-deps.sh
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:quarantine_size_mb=32 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS)

# A minute of load on the whole daemon, with its checks (kvgov loadgen).
soak: build
	$(BUILD_DIR)/apps/kvgov/kvgov loadgen --duration 60

# The replicas' chaos soak (ReplicaChaosTest in tests/e2e/replica_e2e_test.cc;
# `make test` runs it for 30 s under seed 1): SOAK_SECONDS of faults under
# each of SOAK_SEEDS, each run printing its figures.
SOAK_SEEDS ?= 1 2 3
SOAK_SECONDS ?= 120
soak-replicas: build
	@for seed in $(SOAK_SEEDS); do \
	  KVGOV_CHAOS_SEED=$$seed KVGOV_CHAOS_SECONDS=$(SOAK_SECONDS) \
	    $(BUILD_DIR)/tests/kvgov_e2e_tests --gtest_filter='ReplicaChaosTest.*' || exit 1; \
	done

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log

# libFuzzer targets (fuzz/README.md) in their own clang tree, every library
# instrumented with ASan and UBSan. `make fuzz` runs each fuzzer for
# FUZZ_SECONDS; `make fuzz-smoke` is CI's short run. Crash inputs and logs
# land in $(FUZZ_DIR)/fuzz-artifacts.
FUZZ_DIR     ?= build-fuzz
FUZZ_SECONDS ?= 60

fuzz-build: deps
	@cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++ -DKVGOV_BUILD_FUZZERS=ON -DKVGOV_BUILD_TESTS=OFF \
	  -DKVGOV_WERROR=$(WERROR) > $(FUZZ_DIR).configure.log 2>&1 \
	  || { cat $(FUZZ_DIR).configure.log; exit 1; }
	@cmake --build $(FUZZ_DIR) --target kvgov_fuzzers -j $(JOBS)

fuzz: fuzz-build
	@bash scripts/fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

fuzz-smoke: fuzz-build
	@bash scripts/fuzz.sh $(FUZZ_DIR) 10
