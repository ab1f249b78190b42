#!/usr/bin/env bash
# Kaldi's run.pl without Kaldi: run one command as a job array on this machine.
#
#   run_jobs.sh [--max-jobs-run K] JOB=1:N LOG COMMAND...
#
# Runs COMMAND once for each JOB from 1 to N, with the text JOB replaced by the job's number in
# LOG and in every word of COMMAND (as run.pl does), at most K at a time (default: all at once),
# each one's standard output and error in its LOG (folders made). Exits 0 when every job
# succeeded; otherwise 1, naming the jobs that failed and their logs. afp_lmrescore.sh uses it
# when run.pl is not on the PATH; queue.pl and slurm.pl take the same arguments.
set -uo pipefail

max_jobs=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --max-jobs-run) max_jobs=$2; shift 2 ;;
    *) shift 2 ;;  # run.pl's other options (--mem, --gpu ...) do not apply on one machine
  esac
done
if [[ $# -lt 3 || ! $1 =~ ^JOB=([0-9]+):([0-9]+)$ ]]; then
  echo "usage: $0 [--max-jobs-run K] JOB=1:N LOG COMMAND..." >&2
  exit 2
fi
first=${BASH_REMATCH[1]} last=${BASH_REMATCH[2]} log=$2
shift 2

declare -A pids=()
for ((job = first; job <= last; job++)); do
  if ((max_jobs > 0)); then
    while (($(jobs -rp | wc -l) >= max_jobs)); do wait -n || true; done
  fi
  words=()
  for word in "$@"; do words+=("${word//JOB/$job}"); done
  job_log=${log//JOB/$job}
  mkdir -p "$(dirname "$job_log")"
  (
    echo "# ${words[*]}"
    echo "# Started at $(date)"
    "${words[@]}"
    code=$?
    echo "# Ended (code $code) at $(date)"
    exit $code
  ) >"$job_log" 2>&1 &
  pids[$job]=$!
done

failed=()
for ((job = first; job <= last; job++)); do
  wait "${pids[$job]}" || failed+=("$job")
done
if ((${#failed[@]})); then
  echo "$0: ${#failed[@]} of $((last - first + 1)) jobs failed: JOB=${failed[*]} (see ${log//JOB/${failed[0]}})" >&2
  exit 1
fi
