#!/bin/bash
# Which rho should the LibriSpeech model have? (issue 29: WER against real-time factor for rho 2, 3, 4)
# A smaller rho expands a lattice to a lower order, so more of a dense lattice fits the same
# budget; the model sees less context. Training a books-large model per rho is out of reach on a
# CPU, so each rho starts from the shipped AFP-4 weights (models/librispeech/afp, 109,652 steps on
# books-large) and trains on for the same STEPS on books/ (7.6M words, part of its training text)
# at rho 2, 3 and 4; rho 4 is the control, so the three differ only in rho:
#   bash bench/rho_finetune.sh            # rho 2, 3, 4 (resumable: each continues its resume state)
#   bash bench/rho_finetune.sh 3          # one of them
# Then: python -m bench.rho_sweep (perplexities, PocketSphinx WER and speed per rho and target).
# The same recipe as the model otherwise: GRU-256, adaptive softmax, no dropout, batch 64, Adam
# (fresh, lr 0.001), one thread, fp32 on a CPU without native bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-1000}
RUN=runs/rho-finetune
DATA=runs/books-pair/data   # books/ with the model's vocabulary (bench/books_pair.sh prepares it)
if [ ! -f "$DATA/meta.json" ]; then
  mkdir -p runs/books-pair
  .venv/bin/python -c "
import json; c = json.load(open('models/librispeech/afp/config.json'))
open('runs/books-pair/words.txt', 'w').write(''.join(f'{w} {i}\n' for i, w in enumerate(c['vocab']['words'])))"
  .venv/bin/afp prepare --text ../shared/data/books/train.txt --valid ../shared/data/books/valid.txt \
    --words-txt runs/books-pair/words.txt --out "$DATA"
fi
for RHO in ${@:-2 3 4}; do
  OUT=$RUN/rho$RHO
  ARGS="--data $DATA --out $OUT --init-from models/librispeech/afp --cell gru --hidden 256 --mode afp --rho $RHO \
   --softmax adaptive --dropout 0.0 --batch-size 64 --lr 0.001 --lr-decay 0.5 --clip 1.0 --precision auto \
   --num-threads 1 --epochs 1 --max-steps $STEPS --seed 1 --checkpoint-every-minutes 10 --verbose"
  if [ -f "$OUT/resume/state.json" ]; then .venv/bin/afp train $ARGS --resume; else .venv/bin/afp train $ARGS; fi
done
