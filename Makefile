# MoT Cache Service. Every target creates/uses the project virtualenv (.venv); on a fresh
# machine with Python 3.11 and make, `make test` and `make demo` need nothing else.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
MOT    := $(VENV)/bin/mot
STAMP  := $(VENV)/.installed
# CPU wheel by default (a bare `torch` pulls a multi-GB CUDA build); GPU hosts: make setup TORCH=torch
TORCH  ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: setup models data demo test test-fast bench eval eval-other-prose train proto lint clean help

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(STAMP)  ## create .venv and install the project with its dev tools

models: setup  ## pull the three real zoo models (idempotent; ~2 min the first time)
	$(MOT) models pull

data: setup  ## fetch the training corpora (speeches, news and Wikipedia articles, literature, each split) and the held-out novel
	$(MOT) data pull

demo: models  ## the service on this machine: one RAG context shared by the target models (TTFT, cache source)
	$(MOT) demo

test: models  ## the whole suite: unit, integration and the real-model tests (CI runs this)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup  ## unit tests only (tiny models, no downloads), under 2 minutes
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not real_models" tests/unit $(PYTEST_ARGS)

bench: models  ## prefill vs codec and vs translation at 1024 tokens; TTFT fresh/hit vs native through gRPC; store MB/s
	$(MOT) bench --context-tokens 1024
	$(MOT) bench-translation --context-tokens 1024
	$(MOT) bench-service --context-tokens 1024

proto: setup  ## regenerate the gRPC stubs (mot/v1/*_pb2*.py) from proto/mot/v1/mot.proto
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. proto/mot/v1/mot.proto

PAIRS ?= gemma3-270m qwen2.5-0.5b
# the acceptance run of the translator issue; add e.g. --sweep 0.05,0.1,0.2 --ablations for the quality knob
EVAL_ARGS ?= --context-tokens 1024 --samples 200 --seed 7 --no-ablations

TRAIN_DIR = $$($(PY) -c 'from mot_core.paths import mot_home; print(mot_home() / "train")')

train: models data  ## retrain the shipped translators into checkpoints/ with their recipes (hours on CPU)
	# stage 1: one source-layer mixture per target layer, 256-token contexts
	$(MOT) train --source smollm2-135m --target qwen2.5-0.5b --steps 400 --mixes 1 --out checkpoints
	$(MOT) train --source smollm2-135m --target gemma3-270m --steps 600 --mixes 1 --out checkpoints
	# Gemma-3, stage 2: 256- and 1024-token contexts (past its 512-token window)
	$(MOT) train --source smollm2-135m --target gemma3-270m --steps 300 --context-tokens 256,1024 --lr 1e-3 \
	  --mixes 1 --init "$(TRAIN_DIR)/smollm2-135m__gemma3-270m" --work-dir "$(TRAIN_DIR)-stage2" --out checkpoints
	# Gemma-3, stage 3: through the recompute at its operating point (words 10%, the last 3%), from stage 2's int8 checkpoint
	$(MOT) train --source smollm2-135m --target gemma3-270m --steps 150 --context-tokens 1024 --lr 5e-4 \
	  --mixes 1 --init checkpoints/smollm2-135m__gemma3-270m --recompute 0.1 --recompute-recent 0.03 \
	  --through-recompute --seed 1 --work-dir "$(TRAIN_DIR)-stage3" --out checkpoints
	# Qwen2.5, stage 2: four mixtures per target layer (the three new ones start with no weight), 1024 tokens
	$(MOT) train --source smollm2-135m --target qwen2.5-0.5b --steps 150 --context-tokens 1024 --lr 5e-4 \
	  --mixes 4 --init "$(TRAIN_DIR)/smollm2-135m__qwen2.5-0.5b" --work-dir "$(TRAIN_DIR)-stage2" --out checkpoints
	# Qwen2.5, stage 3: through the recompute at its operating point (words 12%, the last 2%), half the contexts news
	$(MOT) train --source smollm2-135m --target qwen2.5-0.5b --steps 150 --context-tokens 1024 --lr 5e-4 \
	  --mixes 4 --init checkpoints/smollm2-135m__qwen2.5-0.5b --recompute 0.12 --recompute-recent 0.02 \
	  --through-recompute --news 0.5 --seed 1 --work-dir "$(TRAIN_DIR)-stage3" --out checkpoints
	# both: the rest of the fraction recomputes names and numbers whole (same weights; reports/experiments/phrases/)
	for t in $(PAIRS); do \
	  $(MOT) translator set checkpoints/smollm2-135m__$$t --recompute-selection phrases -o checkpoints/smollm2-135m__$$t || exit 1; \
	done
	# Gemma-3 serves each token through its router's best expert only (same weights; reports/experiments/experts/ section 3)
	$(MOT) translator set checkpoints/smollm2-135m__gemma3-270m --top-k 1 -o checkpoints/smollm2-135m__gemma3-270m

eval: models data  ## held-out evaluation of the shipped translators (validation split + QA dev set) -> out/eval/
	for t in $(PAIRS); do \
	  $(MOT) eval --source smollm2-135m --target $$t $(EVAL_ARGS) \
	    --corpus "$$($(PY) -c 'from mot_core.data import corpus_root; print(corpus_root() / "validation.jsonl")')" \
	    --qa data/eval/qa_dev.jsonl --out out/eval/smollm2-135m__$$t || exit 1; \
	done

OTHER_PROSE := out/eval-other-prose
WIKI_TEXT   := $(OTHER_PROSE)/qa_dev_contexts.txt

eval-other-prose: models data  ## the same bars on prose of another kind: Moby-Dick, then qa_dev's Wikipedia-style contexts as one text -> out/eval-other-prose/
	mkdir -p $(OTHER_PROSE)
	$(PY) -c "import json, sys; open(sys.argv[2], 'w', encoding='utf-8').write('\n\n'.join(json.loads(l)['context'] for l in open(sys.argv[1], encoding='utf-8')))" \
	  data/eval/qa_dev.jsonl $(WIKI_TEXT)
	novel="$$($(PY) -c 'from mot_core.novel import novel_path; print(novel_path())')"; \
	for text in "moby-dick=$$novel" "wiki=$(WIKI_TEXT)"; do \
	  for t in $(PAIRS); do \
	    $(MOT) eval --source smollm2-135m --target $$t $(EVAL_ARGS) --corpus "$${text#*=}" \
	      --out $(OTHER_PROSE)/$${text%%=*}/smollm2-135m__$$t || exit 1; \
	  done; \
	done

lint: setup  ## ruff
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:  ## remove the virtualenv and caches (pulled models stay in $MOT_HOME)
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
