#!/bin/bash
# The WER table's two GRUs (issue 30): one recipe, one text, one vocabulary, two modes.
#   bash bench/books_pair.sh exact   # full-history GRU-256 trained by BPTT over whole sentences
#   bash bench/books_pair.sh afp     # its AFP-4 twin: a prediction sees exactly the last 4 tokens
# Both train on books/ (7.6M words; books-large is out of reach for a full-history model on this
# CPU) with the 44,122-word vocabulary of models/librispeech/afp, so perplexities compare: GRU-256,
# adaptive softmax, dropout 0.1, 2 epochs (3 were planned; cut to 2 for both, since a fp32 epoch takes
# about 2 hours of one core on this CPU), batch 64, Adam 0.002, one thread (the other core stays
# free), precision auto (bf16 where the CPU computes it natively, else fp32). Resumable: a run
# continues from runs/books-pair/<name>/resume, or from the carried state of an earlier session:
#   python -m bench.carry pack runs/books-pair/gru-h256-exact bench/results/books-pair/carry-exact
# A finished run's best weights are kept (bf16) in bench/results/books-pair/<name> for the table:
#   python -m bench.books_pair keep
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: bash bench/books_pair.sh exact|afp}
case "$MODE" in
  exact) NAME=gru-h256-exact; MODEL="--mode exact" ;;
  afp) NAME=gru-h256-rho4; MODEL="--mode afp --rho 4" ;;
  *) echo "usage: bash bench/books_pair.sh exact|afp" >&2; exit 2 ;;
esac
DATA=../shared/data
RUN=runs/books-pair
OUT=$RUN/$NAME
CARRY=bench/results/books-pair/carry-$MODE
mkdir -p "$RUN"
if [ ! -f "$RUN/data/meta.json" ]; then
  .venv/bin/python -c "
import json; c = json.load(open('models/librispeech/afp/config.json'))
open('$RUN/words.txt', 'w').write(''.join(f'{w} {i}\n' for i, w in enumerate(c['vocab']['words'])))"
  .venv/bin/afp prepare --text $DATA/books/train.txt --valid $DATA/books/valid.txt \
    --words-txt "$RUN/words.txt" --out "$RUN/data"
fi
if [ ! -f "$OUT/resume/state.json" ] && [ -f "$CARRY/state.json" ]; then
  .venv/bin/python -m bench.carry unpack "$CARRY" "$OUT"
fi
ARGS="--data $RUN/data --out $OUT --cell gru --hidden 256 $MODEL --softmax adaptive --dropout 0.1 \
 --batch-size 64 --lr 0.002 --lr-decay 0.5 --clip 1.0 --init-range 0.05 --precision auto --num-threads 1 \
 --epochs 2 --seed 1 --checkpoint-every-minutes 10 --verbose"
if [ -f "$OUT/resume/state.json" ]; then exec .venv/bin/afp train $ARGS --resume; else exec .venv/bin/afp train $ARGS; fi
