#!/usr/bin/env bash
# Rescore Kaldi lattices with the afp-rescore service, from inside a Kaldi container.
#   kaldi-client.sh DIR     DIR holds lat.*.gz (binary or text archives) and words.txt
# Prints one JSON line per lattice (the service's result) to stdout.
set -euo pipefail
dir=${1:-/data}
url=${AFP_URL:-http://afp:8000}
words="$dir/words.txt"
int2sym=${INT2SYM:-/opt/kaldi/egs/wsj/s5/utils/int2sym.pl}

post() {  # stdin: a Kaldi text archive with words spelled out
  if command -v curl >/dev/null; then
    curl -sS --fail-with-body -H 'Content-Type: text/plain' --data-binary @- "$url/v1/rescore?nbest=1"
  else
    python3 -c 'import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.stdin.buffer.read(), headers={"Content-Type": "text/plain"})
print(urllib.request.urlopen(req).read().decode())' "$url/v1/rescore?nbest=1"
  fi
}

shopt -s nullglob
lattices=("$dir"/lat.*.gz)
if [ ${#lattices[@]} -eq 0 ]; then
  echo "no lat.*.gz in $dir" >&2
  exit 1
fi
for lat in "${lattices[@]}"; do
  # binary or text, integer word ids -> a text archive with words (field 3 of CompactLattice arcs)
  lattice-copy "ark:gunzip -c $lat |" ark,t:- | "$int2sym" -f 3 "$words" | post
  echo
done
