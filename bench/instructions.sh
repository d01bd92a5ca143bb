#!/bin/bash
# Instructions a gateway executes for a relay run, counted by callgrind: no load moves
# the count (a busy box moves seconds, not instructions), so two trees compare in one
# sitting on a shared machine.
#
#   bench/instructions.sh TREE [SESSIONS] [SECONDS] [PORT]
#
# Starts TREE's gateway (`gateway.cli serve --plugin tone`, embedded Valkey outside
# valgrind) under `valgrind --tool=callgrind --instr-atstart=no`; once it is ready,
# switches counting on, runs this tree's `relay.py --targets gateway` against it
# (SESSIONS, default 2: callgrind runs it ~50x slower, and a run must hold real time
# or its frames batch), switches counting off and prints the total. The count takes in
# relay.py's idle window and the sessions' opening and closing, so compare trees at two
# session counts and take the difference: what each further session costs. Needs
# valgrind; VENV as for paired.sh (default .venv of the current directory).
set -euo pipefail
tree=$(realpath "$1"); n=${2:-2}; secs=${3:-15}; port=${4:-18850}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${VENV:-$PWD/.venv}/bin/python
out=$(mktemp -d); data=$(mktemp -d)
(cd "$tree" && PYTHONPATH=$tree exec valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$out/cg.out" "$python" -m gateway.cli serve --host 127.0.0.1 \
    --port "$port" --plugin tone --data-dir "$data" --max-sessions 1000 \
    --log-level warning > "$out/gateway.log" 2>&1) &
pid=$!
for _ in $(seq 300); do grep -q "duplex-gateway ready" "$out/gateway.log" && break; sleep 1; done
sleep 5  # past the settling of a process just ready (gateway/heap.py)
callgrind_control -i on "$pid" > /dev/null 2>&1
(cd "$here" && PYTHONPATH=$here "$python" bench/relay.py --targets gateway --sessions "$n" \
    --seconds "$secs" --gateway-url "ws://127.0.0.1:$port/v1/realtime" --gateway-pid "$pid") \
    > "$out/relay.txt" 2>&1
callgrind_control -i off "$pid" > /dev/null 2>&1
callgrind_control -d "$pid" > /dev/null 2>&1
sleep 2
kill -TERM "$pid"; wait "$pid" || true
grep "^gateway" "$out/relay.txt" || cat "$out/relay.txt"
echo "instructions: $(callgrind_annotate "$out"/cg.out.* | awk '/PROGRAM TOTALS/ {print $1}')"
rm -rf "$out" "$data"
