# The two commands (README): `make demo` and `make test`. Everything else is CMake.
#   make test   installs what is missing, builds with -Werror, runs every test; then the ASan+UBSan
#               build runs every test, and the TSan build runs the stress tests.
#   make demo   installs what is missing, builds, replays a real trace and prints the report.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
CONFIGURE = cmake -G Ninja -DDMM_WERROR=ON $(CMAKE_FLAGS)

.PHONY: all deps build test demo clean

all: build

deps:
	@bash scripts/bootstrap.sh

build: deps
	$(CONFIGURE) -S . -B build
	cmake --build build -j $(JOBS)

test: build
	ctest --test-dir build --output-on-failure -j $(JOBS)
	$(CONFIGURE) -S . -B build-asan -DDMM_SANITIZE=address -DDMM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j $(JOBS)
	$(CONFIGURE) -S . -B build-tsan -DDMM_SANITIZE=thread -DDMM_BUILD_BENCH=OFF -DDMM_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -L stress -j $(JOBS)

demo: build
	@bash scripts/demo.sh

clean:
	rm -rf build build-asan build-tsan
