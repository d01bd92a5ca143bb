#!/bin/bash
# Paired A/B: the gateway of two source trees measured at the same time, ROUNDS times.
#
#   bench/paired.sh TREE_A TREE_B [ROUNDS] [SESSIONS] [SECONDS]
#
# Each round starts `relay.py --targets gateway` from both trees together (each its
# own gateway, Valkey and client; the start order alternates), so both runs meet the
# same neighbours: on a shared VM, runs a few minutes apart drift 15 % or more, the
# ratio of two runs side by side 1-2 %. Prints each tree's server CPU ms per
# session-second per round, and B/A. Needs a venv with the project's dependencies
# (VENV, default .venv of the current directory).
set -euo pipefail
a=$(realpath "$1"); b=$(realpath "$2"); rounds=${3:-4}; n=${4:-32}; secs=${5:-20}
python=${VENV:-$PWD/.venv}/bin/python
out=$(mktemp -d)
# ms/sess-s is the 17th field of the row: counted from the start, since the last
# column ("held") runs to several words when a loaded box misses real time
ms() { awk -v n="$n" '$1 == "gateway" && $2 == n {print $17}' "$1"; }
for i in $(seq "$rounds"); do
  if (( i % 2 )); then order=("$a" "$b"); else order=("$b" "$a"); fi
  for t in "${order[@]}"; do
    tag=$([[ $t == "$a" ]] && echo A || echo B)
    (cd "$t" && PYTHONPATH=$t "$python" bench/relay.py --sessions "$n" --seconds "$secs" \
        --targets gateway > "$out/$tag.txt" 2>&1) &
  done
  wait
  ma=$(ms "$out/A.txt"); mb=$(ms "$out/B.txt")
  echo "round $i: A $ma  B $mb  B/A $(awk -v x="$ma" -v y="$mb" 'BEGIN {printf "%.3f", y / x}')"
done
rm -rf "$out"
