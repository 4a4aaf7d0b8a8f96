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

# A compile that dies without a word (CI once saw g++ end on agent.cc with no
# diagnostic; the same happened here once with the disk full) is retried
# once, one job at a time, after printing the memory and disk it had; a real
# error fails the retry too and prints its message.
build: configure
	cmake --build --preset default -j $(JOBS) || { \
	  echo "build failed; memory and disk:"; free -m; df -h . /tmp; \
	  echo "retrying once with one job"; cmake --build --preset default -j 1; }

test: build
	ctest --preset default -j $(JOBS)

run: build
	./scripts/run-local.sh

bench: build
	./$(BUILD_DIR)/bench/sched_bench

clean:
	rm -rf $(BUILD_DIR)
