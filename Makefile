# The two set-up commands are `make run` and `make test`; both install what
# is missing (scripts/install-deps.sh, Debian packages only) and build first.

BUILD_DIR  ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
LISTEN     ?= 127.0.0.1:8787
DATA_DIR   ?= ./kvgov-data
# CI builds treat warnings as errors.
WERROR     := $(if $(CI),ON,OFF)

.PHONY: all deps configure build test run clean

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
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

run: build
	$(BUILD_DIR)/apps/kvgov/kvgov serve --listen $(LISTEN) --data-dir $(DATA_DIR)

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log
