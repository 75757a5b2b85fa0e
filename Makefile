# make test  — install what is missing (Debian), configure, build, run every test.
# make demo  — build and run the main job (gdn demo; `gdn replay DIR` replays capture files).
# make test-python — build the torch extension in $(BUILD) and run python/tests (pytest).
# make test-cpu-only — the CPU-only configuration (GDN_ENABLE_CUDA=OFF, no CUDA headers needed) in
#   $(BUILD)-cpu: builds everything and runs the C++ tests (CI runs it after make test).
# make test-sanitize — the CPU-only configuration under AddressSanitizer and UndefinedBehaviorSanitizer
#   in $(BUILD)-asan: every C++ test (CI runs it last).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps configure build test test-python test-cpu-only test-sanitize demo clean

deps:
	@./scripts/install_deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	$(MAKE) test-python

# The torch tests use the first python3 that imports torch (a pyenv shim may shadow Debian's);
# without one the target fails, saying so. Looked up when the recipe runs, after deps.
test-python: deps
	@py=$$(for p in python3 /usr/bin/python3; do $$p -c 'import torch' >/dev/null 2>&1 && { command -v $$p; break; }; done); \
	if [ -z "$$py" ]; then echo "test-python: no python3 imports torch (make deps installs python3-torch)"; exit 1; fi; \
	set -ex; \
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DGDN_BUILD_TORCH=ON -DGDN_TORCH_PYTHON=$$py $(CMAKE_FLAGS); \
	cmake --build $(BUILD) -j $(JOBS) --target gdn_torch gdn_torch_api_harness; \
	GDN_TORCH_LIB=$(abspath $(BUILD))/lib GDN_TORCH_HARNESS=$(abspath $(BUILD))/bin/gdn_torch_api_harness \
	  PYTHONPATH=$(CURDIR)/python $$py -m pytest -q -p no:cacheprovider python/tests

test-cpu-only: deps
	cmake -S . -B $(BUILD)-cpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGDN_ENABLE_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD)-cpu -j $(JOBS)
	ctest --test-dir $(BUILD)-cpu --output-on-failure -j $(JOBS)

SANITIZE = -fsanitize=address,undefined
test-sanitize: deps
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDN_ENABLE_CUDA=OFF \
	  -DCMAKE_CXX_FLAGS="$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  -DCMAKE_EXE_LINKER_FLAGS="$(SANITIZE)" -DCMAKE_SHARED_LINKER_FLAGS="$(SANITIZE)" $(CMAKE_FLAGS)
	cmake --build $(BUILD)-asan -j $(JOBS)
	ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS)

demo: build
	$(BUILD)/bin/gdn demo $(DEMO_ARGS)

clean:
	rm -rf $(BUILD) $(BUILD)-cpu $(BUILD)-asan
