# zlane: `make demo` runs the whole system once; `make test` runs every test.
# Both install missing Debian packages first (as root), then build with CMake.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2
# seconds each libFuzzer target runs in `make test` (fuzz_smoke)
export ZLANE_FUZZ_SECONDS ?= 30
# compiler warnings are errors in these builds (the fuzz build of fuzz_smoke
# too); WERROR=OFF for a compiler that warns about more than gcc 12 does
WERROR     ?= ON
# make test's set-up adds what only the tests need (scripts/deps.sh --test:
# PostgreSQL, for tests/support/pg_harness) and builds those tests, failing
# if it is missing (ZLANE_PG_TESTS=ON); make demo needs none of it. The test
# target sets these for its prerequisites (deps, build, build-asan).
DEPS_ARGS  ?=
PG_TESTS   ?=
PG_CMAKE    = $(if $(PG_TESTS),-DZLANE_PG_TESTS=$(PG_TESTS))

.PHONY: all deps build build-asan demo test check-format bench experiments fuzz clean format

all: build

deps:
	@scripts/deps.sh $(DEPS_ARGS)

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZLANE_WERROR=$(WERROR) \
	  $(PG_CMAKE) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) -- -s

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DZLANE_SANITIZE=ON \
	  -DZLANE_WERROR=$(WERROR) $(PG_CMAKE) >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS) -- -s

# every tracked .c/.h formatted with the committed .clang-format (clang-format 14)
check-format: deps
	@scripts/check-format.sh

demo: build
	@deploy/demo.sh $(BUILD)/bin

# The format check first, then the builds (warnings are errors), then the
# whole suite on the normal build (unit tests in parallel, then the
# process-level tests one at a time so their timings are their own), then
# again under ASan + UBSan (the 20,000-job crash test only once). The
# PostgreSQL tests (label pg) run with the unit tests.
test: DEPS_ARGS = --test
test: PG_TESTS = ON
test: check-format build build-asan
	cd $(BUILD) && ctest --output-on-failure -j2 -LE integration
	cd $(BUILD) && ctest --output-on-failure -L integration
	cd $(ASAN_BUILD) && ctest --output-on-failure -j2 -LE "integration|slow"
	cd $(ASAN_BUILD) && ctest --output-on-failure -L integration -LE slow

bench: build
	@ZLANE_BIN=$(BUILD)/bin bench/run-bench.sh

experiments: build
	@ZLANE_BIN=$(BUILD)/bin bench/run-experiments.sh

fuzz: deps
	@ZLANE_FUZZ_SECONDS=$${FUZZ_SECONDS:-60} tests/fuzz/run.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
