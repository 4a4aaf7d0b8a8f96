# The two commands: `make run` and `make test`. Each installs what is missing
# (scripts/install-deps.sh), builds, and runs.

BUILD_DIR := build
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test run bench clean

all: build

deps:
	./scripts/install-deps.sh

configure: deps
	cmake --preset default

build: configure
	cmake --build --preset default -j $(JOBS)

test: build
	ctest --preset default -j $(JOBS)

run: build
	./scripts/run-local.sh

bench: build
	./$(BUILD_DIR)/bench/sched_bench

clean:
	rm -rf $(BUILD_DIR)
