# perfharness: `make run` and `make test` do all the set-up on a fresh Debian machine that
# has the Swift toolchain.
SWIFT ?= swift
SHELL := /bin/bash
SYSTEM_PACKAGES := libunwind-dev libdw-dev
# The HTML report's tests open it in a real headless browser; the pprof export is read back
# by protoc. Programs are recorded on jemalloc and tcmalloc (runtime libraries only: the
# jemalloc-linked fixture links the .so.2 by name). C programs built without frame pointers
# are built as users build them, with Debian's gcc.
TEST_PACKAGES := chromium protobuf-compiler linux-perf libjemalloc2 libtcmalloc-minimal4 libgoogle-perftools4 gcc
# Scenarios are profiled in release, as Instruments profiles a Release build.
RUN_CONFIGURATION ?= release
ARGS ?=

.PHONY: help setup system-packages build run test test-tsan bench leak-corpus raw-buffer-leaks stress server-fixture lint golden clean

## help: this list: each target and the first line of its `##` comment.
help:
	@grep -E '^## [a-z-]+:' $(MAKEFILE_LIST) | sed -E 's/^## ([a-z-]+): *(.*)/\1\t\2/' | awk -F '\t' '{ printf "  %-18s %s\n", $$1, $$2 }'

## setup: install the missing system packages, resolve the Swift packages (idempotent).
##   apt-get as root, sudo otherwise (asking for the password on a terminal), and a clear
##   message when neither works. The tests'
##   schema checks need Python's jsonschema: Debian's python3-jsonschema (pip refuses to
##   install into Debian's own Python, PEP 668), pip only for a python3 that is not Debian's.
setup: system-packages
	@python3 -c "import jsonschema" 2>/dev/null || \
	  $(MAKE) --no-print-directory system-packages SYSTEM_PACKAGES=python3-jsonschema
	@python3 -c "import jsonschema" 2>/dev/null || python3 -m pip install --quiet jsonschema
	@$(SWIFT) package resolve >/dev/null

system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	  elif command -v sudo >/dev/null && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then sudo=sudo; \
	  else echo "error: perfharness needs the Debian packages $$missing; run: sudo apt-get install -y $$missing" >&2; exit 1; fi; \
	  echo "installing $$missing" >&2; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

build: setup
	$(SWIFT) build -c $(RUN_CONFIGURATION)

## run: every scenario (starter variant) under the instruments; reports under Reports/.
run: build
	$(SWIFT) run -c $(RUN_CONFIGURATION) perfharness scenario $(ARGS)

## test: the whole test suite, then the ThreadSanitizer suites.
##   A debug build; the end-to-end tests run the built binaries, the leaks corpus a release build.
test: setup lint
	@$(MAKE) --no-print-directory system-packages SYSTEM_PACKAGES="$(TEST_PACKAGES)"
	$(SWIFT) build --build-tests -Xswiftc -warnings-as-errors
	scripts/check-c-symbols.sh .build/debug
	$(SWIFT) build -c release --product perfharness-leak-corpus
	@$(MAKE) --no-print-directory server-fixture
	@# The log is kept, and a failure ends with its failed expectations: CI shows only
	@# the tail of a run, where otherwise only the suites' summaries would be.
	@set -o pipefail; $(SWIFT) test --skip-build 2>&1 | tee .build/test.log || { \
	  echo "== failed tests (whole log: .build/test.log) =="; \
	  grep -E "recorded an issue|^↳ [^/]|with [0-9]+ issues?\.$$" .build/test.log | grep -v "Suite\|Test run\|Testing Library\|Target Platform" | tail -60; \
	  exit 1; }
	@$(MAKE) --no-print-directory test-tsan

## test-tsan: the suites ThreadSanitizer can judge, in their own build folder (.build-tsan).
##   TSan replaces malloc with its own allocator, so the malloc interposer is compiled out
##   under it and nothing that records allocations or leaks can run (the recorder suites,
##   the end-to-end scenario tests, the report fuzzer's seed run). TSan also defers signal
##   handlers to its own safe points, so the sampler runs but its stacks are TSan's: the
##   tests of sample accuracy disable themselves under TSan (trait
##   `.samplesWhereTheSignalLands`, Tests/PerfHarnessTests/ThreadSanitizerTrait.swift).
##   Symbolizer tests see TSan's backtrace
##   interceptor; PhotoSearch's Mutex is invisible to TSan on Linux (false reports).
TSAN_SUITES := CallTreeTests|SymbolNameTests|ThresholdsTests|FuzzThresholdsTests|LeakSuppressionsTests|SamplingSessionTests|TimeProfilerTests|FoldedStacksTests|CallTreeTextTests|SpeedscopeTests
test-tsan: setup
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build-tsan
	$(SWIFT) test --skip-build --sanitize=thread --scratch-path .build-tsan \
	  --filter '$(TSAN_SUITES)'

## bench: overhead figures against their targets; regenerates docs/measurements.md's table.
bench: setup
	@$(MAKE) --no-print-directory system-packages SYSTEM_PACKAGES="heaptrack valgrind linux-perf"
	$(SWIFT) build -c release
	$(SWIFT) build -c release --product bench-workload --sanitize=address --scratch-path .build-asan
	$(SWIFT) run -c release perfharness-bench

## leak-corpus: every leak shape RUNS times per build and instrument set; fails on any miss.
##   Cycles through closures, delegates, arrays of closures, made on the main thread, Dispatch
##   workers and in task groups, each run in its own process; prints found/expected per
##   shape and fails on any run that missed or invented a leak.
RUNS ?= 50
leak-corpus: setup
	$(SWIFT) build -c release --product perfharness-leak-corpus
	$(SWIFT) build --product perfharness-leak-corpus
	$(SWIFT) build --product perfharness-leak-corpus-runner
	.build/debug/perfharness-leak-corpus-runner --runs $(RUNS)

## raw-buffer-leaks: every raw-buffer leak configuration RAW_BUFFER_RUNS times; fails on any miss.
##   Raw buffers a program loses (C built by cc -O2, with and without -fomit-frame-pointer,
##   and Swift's), in record and scenario mode, sizes around a chunk
##   boundary, each instrument set, RAW_BUFFER_RUNS runs each (scripts/raw-buffer-leaks.sh);
##   prints found/expected per configuration and fails on any run that missed a block or
##   found another. The whole set is 336 configurations (about 1 run a second here, two at a
##   time); MODES, SIZES and C_CASES narrow it (see the script). Not part of `make test`, which
##   runs a few of each (RawBufferLeakTests).
RAW_BUFFER_RUNS ?= 30
raw-buffer-leaks: setup
	@$(MAKE) --no-print-directory system-packages SYSTEM_PACKAGES=gcc
	$(SWIFT) build -c release --product perfharness
	$(SWIFT) build -c release --product PerfHarnessPreload
	$(SWIFT) build -c release --product record-target-swift
	$(SWIFT) build -c release --product perfharness-leak-corpus
	scripts/raw-buffer-leaks.sh $(RAW_BUFFER_RUNS) .build/release

## stress: the robustness attacks (#42) on the debug build, each printed held or broken.
##   scripts/stress.sh; not part of `make test`.
stress: setup
	$(SWIFT) build --product perfharness
	$(SWIFT) build --product record-target-swift
	$(SWIFT) build --product record-target-c
	$(SWIFT) build --product PerfHarnessPreload
	scripts/stress.sh .build/debug

## server-fixture: the Hummingbird 2 server that ServerRecordTests records under load, a
##   package of its own (Tests/Fixtures/LeakingServer: perfharness does not depend on
##   Hummingbird), built in release, as a server runs, into .build/server-fixture.
server-fixture:
	$(SWIFT) build -c release --package-path Tests/Fixtures/LeakingServer --scratch-path $(CURDIR)/.build/server-fixture

## lint: swift-format for Swift; clang-format (.clang-format, Debian's clang-format) for C,
##   and the C sources compiled with -Wall -Wextra -Werror (scripts/check-c-warnings.sh).
C_SOURCES = $(wildcard Sources/C*/*.c Sources/C*/*.h Sources/C*/include/*.h Tests/Fixtures/*/*.c Tests/Fixtures/*/include/*.h)
lint: system-packages
	@$(MAKE) --no-print-directory system-packages SYSTEM_PACKAGES=clang-format
	$(SWIFT) format lint --recursive --strict Sources Scenarios Tests Examples
	clang-format --dry-run --Werror $(C_SOURCES)
	scripts/check-c-warnings.sh

## golden: rewrite the summaries' expected files (Tests/Fixtures/SummaryGolden) from the renderers.
##   Only deliberately: review `git diff Tests/Fixtures/SummaryGolden` as the change it is.
golden: setup
	$(SWIFT) build --build-tests
	PERFHARNESS_REGENERATE_GOLDEN=1 $(SWIFT) test --skip-build --filter SummaryGoldenTests

clean:
	rm -rf .build
