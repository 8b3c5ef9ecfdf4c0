# SPDX-License-Identifier: Apache-2.0
# The two commands (README): `make demo` and `make test`. Everything else is CMake.
#   make test   installs what is missing, then scripts/test.sh: builds with -Werror and runs every
#               test (plain), every test under ASan+UBSan, the stress tests under TSan, every test
#               built by clang, and every fuzz harness over its corpus plus FUZZ_SECONDS of fresh
#               fuzzing; it ends with one summary line (N passed, N failed, N skipped).
#   make fuzz   only the fuzz harnesses, each for FUZZ_SECONDS (e.g. make fuzz FUZZ_SECONDS=600).
#   make demo   installs what is missing, builds, replays a real trace and prints the report.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 10
CONFIGURE = cmake -G Ninja -DDMM_WERROR=ON $(CMAKE_FLAGS)
TEST = JOBS=$(JOBS) CMAKE_FLAGS='$(CMAKE_FLAGS)' FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/test.sh

.PHONY: all deps deps-clang build test fuzz demo clean

all: build

deps:
	@bash scripts/bootstrap.sh

deps-clang: # deps, and clang with its sanitizer and libFuzzer runtimes
	@bash scripts/bootstrap.sh --clang

build: deps
	$(CONFIGURE) -S . -B build
	cmake --build build -j $(JOBS)

test: deps-clang
	@$(TEST)

fuzz: deps-clang
	@$(TEST) fuzz

demo: build
	@bash scripts/demo.sh

clean:
	rm -rf build build-asan build-tsan build-clang build-fuzz
