# Front end over CMake. `make` builds build/strata; `make test` builds and runs every test.
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all strata test demo bench sanitize fuzz format clean

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

# Every test again under AddressSanitizer + UndefinedBehaviorSanitizer (Debug, no benches).
build-asan/CMakeCache.txt:
	scripts/setup
	cmake -S . -B build-asan $(GEN) -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON -DSTRATA_BENCH=OFF $(CMAKE_FLAGS)

sanitize: build-asan/CMakeCache.txt
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j $(JOBS)

# libFuzzer over the GGUF parser for FUZZ_SECONDS, starting from the committed seed corpus.
build-fuzz/CMakeCache.txt:
	scripts/setup
	CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_FUZZ=ON -DSTRATA_TESTS=OFF $(CMAKE_FLAGS)

fuzz: build-fuzz/CMakeCache.txt
	cmake --build build-fuzz -j $(JOBS) --target fuzz_gguf
	rm -rf build-fuzz/corpus && mkdir -p build-fuzz/corpus && cp fuzz/corpus/gguf/* build-fuzz/corpus/
	build-fuzz/fuzz/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
	  -artifact_prefix=build-fuzz/ build-fuzz/corpus

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf build build-asan build-fuzz
