#!/bin/bash
# bench-service, the code before (HEAD worktree) and after (working tree), alternating
source .venv/bin/activate  # from the repository root; "before" is a worktree at /tmp/before
export MOT_HOME=${MOT_HOME:-~/.cache/mot}
out=${OUT:-/tmp/ab}; mkdir -p $out
for round in ${ROUNDS:-1 2}; do
  for which in before after; do
    if [ $which = before ]; then dir=/tmp/before; else dir=$PWD; fi
    (cd $dir && PYTHONPATH=$dir python -c "import sys; sys.argv=['mot','bench-service','--context-tokens','1024','--repeats','${REPEATS:-3}']; from services.cli import main; main()") > $out/$which-$round.txt 2>&1
    grep -h "recomputed \|behind the request" /tmp/ray/session_latest/logs/serve/replica_*.log | sed 's/.*-- //' > $out/$which-$round.log
    grep -A3 "fresh ms" $out/$which-$round.txt
  done
done
