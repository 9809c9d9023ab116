# Front end over CMake. `make` builds build/strata; `make test` builds and runs every test.
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all strata test demo bench sanitize fuzz format format-check clean

all: strata

# The first configure installs what the build needs (scripts/setup is idempotent), so `make demo`
# and `make test` work on a fresh machine.
build/CMakeCache.txt:
	scripts/setup
	cmake -S . -B build $(GEN) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

strata: build/CMakeCache.txt
	cmake --build build -j $(JOBS)

test: strata
	ctest --test-dir build --output-on-failure -j $(JOBS)

# The main job on the project's own embedded default: see scripts/demo.
demo: strata
	scripts/demo build/strata

bench: strata
	build/bench/bench_gemv

# One clang-14 build with AddressSanitizer + UBSan for every test and the libFuzzer targets
# (-O1: sanitized tests at a bearable speed).
build-asan/CMakeCache.txt:
	scripts/setup
	CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
	  -DSTRATA_SANITIZE=ON -DSTRATA_FUZZ=ON -DSTRATA_BENCH=OFF $(CMAKE_FLAGS)

sanitize: build-asan/CMakeCache.txt
	cmake --build build-asan -j $(JOBS)
	STRATA_TEST_DIVISOR=4 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j $(JOBS) -LE slow

# Each libFuzzer target for FUZZ_SECONDS, starting from its committed seed corpus.
fuzz: build-asan/CMakeCache.txt
	cmake --build build-asan -j $(JOBS)
	@set -e; for f in build-asan/fuzz/fuzz_*; do \
	  name=$$(basename $$f); corpus=fuzz/corpus/$${name#fuzz_}; work=build-asan/fuzz-work/$$name; \
	  rm -rf $$work && mkdir -p $$work/corpus && { [ -d $$corpus ] && cp $$corpus/* $$work/corpus/ || true; }; \
	  echo "== $$name for $(FUZZ_SECONDS) s"; \
	  if ! $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
	       -artifact_prefix=$$work/ $$work/corpus >$$work/log 2>&1; then \
	    tail -n 40 $$work/log; echo "$$name: failure, input saved under $$work/"; exit 1; fi; \
	  tail -n 2 $$work/log; \
	done

# Every C++ and CUDA file of ours in the style of .clang-format (clang-format 14, as Debian 12 has it).
FORMAT_FILES = $$(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
format:
	clang-format-14 -i $(FORMAT_FILES)

format-check:
	clang-format-14 --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf build build-asan
