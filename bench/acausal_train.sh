#!/bin/bash
# The window models (and causal baselines) of the acausal study (bench/results/acausal.json), trained one after the other on one
# CPU thread in bf16 (the other core stays free), each resumable (step checkpoints every 10 minutes;
# run this again to go on where it stopped):
#   1. Switchboard (1.4M words): GRU-256 with rho 3, causal AFP-3 and window models K = 1, 2, 3,
#      one epoch each: the pseudo-perplexity table.
#   2. books/ (7.6M words, the 44,122-word vocabulary of models/librispeech): a window model
#      rho 4, K = 2, GRU-256, one epoch: the LibriSpeech WER table's acausal feature.
#   bash bench/acausal_train.sh [switchboard|books|all]
# The books window model, as kept across the sessions that trained it (bf16), is in
# bench/results/acausal/carry/books-window-rho4-k2 (bench/carry.py carried it: see the git history).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=../shared/data
RUNS=runs/acausal
AFP=.venv/bin/afp
WHAT=${1:-all}
mkdir -p "$RUNS"

common="--cell gru --hidden 256 --softmax adaptive --dropout 0.1 --batch-size 64 --lr 0.002 --lr-decay 0.5 \
 --clip 1.0 --init-range 0.05 --precision bf16 --num-threads 1 --seed 1 --checkpoint-every-minutes 10"

train() {  # OUT, then the model and data options
  local out=$1; shift
  if [ -f "$out/model.safetensors" ] && [ ! -f "$out/resume/state.json" ]; then return; fi
  if [ -f "$out/resume/state.json" ]; then
    if python3 -c "import json,sys; s=json.load(open('$out/resume/state.json')); sys.exit(0 if s['epoch']>=s['train_config']['epochs'] else 1)"; then
      return  # finished
    fi
    $AFP train --out "$out" --resume
  else
    $AFP train --out "$out" "$@" $common
  fi
}

if [ "$WHAT" = all ] || [ "$WHAT" = switchboard ]; then
  if [ ! -f "$RUNS/swb-data/meta.json" ]; then
    $AFP prepare --text $DATA/switchboard/train.txt --valid $DATA/switchboard/valid.txt --min-count 2 \
      --out "$RUNS/swb-data"
  fi
  train "$RUNS/swb-causal-rho3" --data "$RUNS/swb-data" --rho 3 --epochs 1
  for k in 1 2 3; do
    train "$RUNS/swb-window-rho3-k$k" --data "$RUNS/swb-data" --rho 3 --future "$k" --epochs 1
  done
fi
if [ "$WHAT" = all ] || [ "$WHAT" = books ]; then
  if [ ! -f "$RUNS/books-data/meta.json" ]; then
    .venv/bin/python -c "
import json; c = json.load(open('models/librispeech/afp/config.json'))
open('$RUNS/words.txt', 'w').write(''.join(f'{w} {i}\n' for i, w in enumerate(c['vocab']['words'])))"
    $AFP prepare --text $DATA/books/train.txt --valid $DATA/books/valid.txt --words-txt "$RUNS/words.txt" \
      --out "$RUNS/books-data"
  fi
  train "$RUNS/books-window-rho4-k2" --data "$RUNS/books-data" --rho 4 --future 2 --epochs 1
fi
