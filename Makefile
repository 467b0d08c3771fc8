# zlane: `make demo` runs the whole system once; `make test` runs every test.
# Both install missing Debian packages first (as root), then build with CMake.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2

.PHONY: all deps build build-asan demo test test-unit test-asan clean format

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) -- -s

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DZLANE_SANITIZE=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS) -- -s

demo: build
	@deploy/demo.sh $(BUILD)/bin

# The whole suite on the normal build, then again under ASan + UBSan.
test: build build-asan
	cd $(BUILD) && ctest --output-on-failure -j2
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j2

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j2 -L unit

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
