#!/bin/bash
# The LibriSpeech-domain model on books/ + books-large/ (67.6M words), with the 44,122-word
# vocabulary of models/librispeech/afp (so perplexities compare): GRU-256 AFP-4, adaptive softmax,
# bf16 on a CPU with AMX, one thread (the other core stays free). Resumable (runs/books-large):
#   bash bench/books_large.sh            # prepare the shards if needed, train
#   bash bench/books_large.sh --prepare-only   # the shards only
#   MODEL=h512 bash bench/books_large.sh       # GRU-512 AFP-4 with an adaptive input (issue 49's CPU run)
# The GRU-256 run's last state and its best weights, as kept across the sessions that trained it (bf16), are in
# bench/results/books-large/carry and best (the retired bench/carry.py packed them: see the git history). A run
# still going is carried between sessions by `afp carry pack` into bench/results/books-large/carry-$MODEL (once a
# session) and unpacked here.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=../shared/data
RUN=runs/books-large
MODEL=${MODEL:-h256}
case "$MODEL" in
  h256) OUT=$RUN/gru-h256-rho4; NET="--hidden 256" ;;
  h512) OUT=$RUN/gru-h512-ai-rho4; NET="--hidden 512 --adaptive-input" ;;
  *) echo "MODEL must be h256 or h512, got $MODEL" >&2; exit 2 ;;
esac
# a run carried from an earlier session (afp carry pack "$OUT" "$CARRY", committed once a session) resumes here
CARRY=bench/results/books-large/carry-$MODEL
if [ -f "$CARRY/CARRIED.json" ] && [ ! -f "$OUT/resume/state.json" ]; then .venv/bin/afp carry unpack "$CARRY" "$OUT"; fi
mkdir -p "$RUN"
if [ ! -f "$RUN/data/meta.json" ]; then
  .venv/bin/python -c "
import json; c = json.load(open('models/librispeech/afp/config.json'))
open('$RUN/words.txt', 'w').write(''.join(f'{w} {i}\n' for i, w in enumerate(c['vocab']['words'])))"
  .venv/bin/afp prepare --text $DATA/books/train.txt $DATA/books-large/train-0{1,2,3,4,5,6}.txt.gz \
    --valid $DATA/books/valid.txt --words-txt "$RUN/words.txt" --out "$RUN/data"
fi
if [ "${1:-}" = "--prepare-only" ]; then exit 0; fi  # the shards only (bench.bundle_mixtures)
ARGS="--data $RUN/data --out $OUT --cell gru $NET --rho 4 --softmax adaptive --dropout 0.0 \
 --batch-size 64 --lr 0.002 --lr-decay 0.5 --clip 1.0 --init-range 0.05 --precision bf16 --num-threads 1 \
 --epochs 3 --seed 1 --checkpoint-every-minutes 10 --verbose"
if [ -f "$OUT/resume/state.json" ]; then exec .venv/bin/afp train $ARGS --resume; else exec .venv/bin/afp train $ARGS; fi
