#!/bin/bash
# bench-translation for the commit before (a worktree at /tmp/before: git worktree add /tmp/before 6f81302) and this one, alternating twice
REPO=$(git rev-parse --show-toplevel)
source $REPO/.venv/bin/activate
export MOT_HOME=${MOT_HOME:-$HOME/.cache/mot}
run() { # $1 label $2 dir
  echo "=== $1 $(date +%T)"
  (cd $2 && PYTHONPATH=$2 python -c "import sys; sys.argv=['mot','bench-translation','--context-tokens','1024','--samples','6']; from services.cli import main; main()" 2>&1 | grep -v "Loading\|it/s\]" | tail -8)
}
# the float32 run: export ONEDNN_MAX_CPU_ISA=AVX2, and add --config (a copy of configs/local.yaml with
# Gemma-3 alone) and --corpus $MOT_HOME/data/moby-dick/moby-dick.txt
for round in 1 2; do
  run before /tmp/before
  run after $REPO
done
