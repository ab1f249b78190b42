#!/usr/bin/env bash
# Rescore a Kaldi decode directory exactly with an AFP language model, as Kaldi's
# steps/lmrescore*.sh do: one job per lat.JOB.gz, the same layout out.
#
#   afp_lmrescore.sh [options] <lang-dir|words.txt> <decode-dir-in> <decode-dir-out>
#
# Reads <decode-dir-in>/num_jobs and lat.{1..num_jobs}.gz, runs
#   $cmd JOB=1:$nj <out>/log/rescore.JOB.log afp rescore --job JOB --num-jobs $nj --out-dir <out> ...
# and writes <out>/lat.JOB.gz (rescored lattices: Kaldi text archives, gzipped, integer word ids,
# the combined LM score as graph score, which lattice-best-path, lattice-scale and
# local/score.sh read), <out>/lat.JOB.jsonl (afp's results), <out>/lat.JOB.text (transcripts),
# <out>/summary.JOB.json and <out>/num_jobs. Run it again after a failure or a kill: the jobs
# skip the archives that are done. With --data DIR and a local/score.sh, it scores <out> as
# Kaldi's scripts do.
#
# Options:
#   --cmd CMD          run.pl, queue.pl, slurm.pl ... (default: run.pl when on the PATH, else
#                      run_jobs.sh beside this script)
#   --model DIR        the AFP model directory (default: afp's bundled model)
#   --afp PROG         the afp command (default: afp)
#   --old-lm ARPA      the ARPA n-gram that built G, subtracted exactly (Kaldi's lmrescore)
#   --weights JSON     weights of afp tune --save (instead of the untuned defaults)
#   --lm-weight W      the new LM's weight (instead of --weights)
#   --extra "FLAGS"    more afp rescore flags, e.g. "--device cuda --workers 8"
#   --data DIR         score <out> with local/score.sh --cmd CMD DIR <lang-dir> <out>
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cmd="" model="" afp=afp old_lm="" weights="" lm_weight="" extra="" data=""
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --cmd) cmd=$2 ;;
    --model) model=$2 ;;
    --afp) afp=$2 ;;
    --old-lm) old_lm=$2 ;;
    --weights) weights=$2 ;;
    --lm-weight) lm_weight=$2 ;;
    --extra) extra=$2 ;;
    --data) data=$2 ;;
    *) echo "$0: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
if [[ $# -ne 3 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
lang=$1 indir=$2 dir=$3
words=$lang
[[ -d $lang ]] && words=$lang/words.txt
[[ -f $words ]] || { echo "$0: no words.txt: $words" >&2; exit 1; }
[[ -f $indir/num_jobs ]] || { echo "$0: no $indir/num_jobs (is $indir a decode directory?)" >&2; exit 1; }
nj=$(cat "$indir/num_jobs")
for ((j = 1; j <= nj; j++)); do
  [[ -f $indir/lat.$j.gz ]] || { echo "$0: $indir/lat.$j.gz is missing (num_jobs is $nj)" >&2; exit 1; }
done
if [[ -z $cmd ]]; then
  if command -v run.pl >/dev/null; then cmd=run.pl; else cmd=$here/run_jobs.sh; fi
fi

mkdir -p "$dir/log"
flags=(--words "$words" --out-dir "$dir" --also lattices,text --quiet)
[[ -n $model ]] && flags+=(--model "$model")
[[ -n $old_lm ]] && flags+=(--old-lm "$old_lm")
[[ -n $weights ]] && flags+=(--weights "$weights")
[[ -n $lm_weight ]] && flags+=(--lm-weight "$lm_weight")
inputs=()
for ((j = 1; j <= nj; j++)); do inputs+=("$indir/lat.$j.gz"); done

# word splitting of $cmd, $afp and $extra is wanted (e.g. --cmd "queue.pl --mem 4G")
# shellcheck disable=SC2086
$cmd JOB=1:"$nj" "$dir/log/rescore.JOB.log" $afp rescore --job JOB --num-jobs "$nj" "${flags[@]}" $extra \
  "${inputs[@]}"
echo "$nj" >"$dir/num_jobs"
echo "$0: rescored $nj archives into $dir (summaries: $dir/summary.*.json)"

if [[ -n $data ]]; then
  if [[ -x local/score.sh ]]; then
    local/score.sh --cmd "$cmd" "$data" "$lang" "$dir"
  else
    echo "$0: --data given but no local/score.sh here (run it from the recipe's folder)" >&2
    exit 1
  fi
fi
