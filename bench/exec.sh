#!/usr/bin/env bash
# Start-to-exit latency of `/bin/true`: a bare spawn, corral's `process` and `linux` backends
# (`linux`: with its default warm sandbox pool; `linux-cold`: without one), and
# `bwrap --ro-bind / / --unshare-all --die-with-parent`, in one hyperfine run; then exec-bench's
# in-process loop (the same five, interleaved round-robin, without corral's process start-up).
#
#   bench/exec.sh                 # RUNS=300 hyperfine runs per command, LOOP=200 loop runs
#   RUNS=1000 LOOP=500 bench/exec.sh
#   BEFORE=/path/to/old/exec-bench bench/exec.sh   # also A/B loops: old and new, alternating
#
# Needs hyperfine and bubblewrap (`apt-get install -y hyperfine bubblewrap`) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in hyperfine bwrap python3; do
    command -v "$tool" >/dev/null || {
        echo "exec.sh: \`$tool\` is missing (apt-get install -y hyperfine bubblewrap python3)" >&2
        exit 1
    }
done

RUNS=${RUNS:-300}
LOOP=${LOOP:-200}
JSON=${JSON:-$(mktemp --suffix=.json)}

cargo build --release --quiet -p exec-bench
BIN=$PWD/target/release/exec-bench
# Fail early, with the backend's own error, if a variant cannot run here.
"$BIN" process
"$BIN" linux
"$BIN" linux-cold
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"

echo "== hyperfine -N --warmup 20 --runs $RUNS (each command pays its own exec)"
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$JSON" \
    -n bare '/bin/true' \
    -n process "$BIN process" \
    -n linux "$BIN linux" \
    -n linux-cold "$BIN linux-cold" \
    -n bwrap 'bwrap --ro-bind / / --unshare-all --die-with-parent /bin/true'

python3 - "$JSON" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
med = {name: results[name]["median"] * 1000 for name in results}
print()
print(f"{'command':<8} {'median ms':>10} {'mean ms':>10} {'stddev':>8}")
for name, r in results.items():
    print(f"{name:<8} {med[name]:>10.3f} {r['mean'] * 1000:>10.3f} {r['stddev'] * 1000:>8.3f}")
print(f"ratio linux/bwrap   {med['linux'] / med['bwrap']:.2f}   (target <= 1.0)")
print(f"ratio linux-cold/bwrap {med['linux-cold'] / med['bwrap']:.2f}")
print(f"ratio process/bare  {med['process'] / med['bare']:.2f}")
print(f"ratio linux/process {med['linux'] / med['process']:.2f}")
PY

echo
echo "== exec-bench loop $LOOP (in-process: the backends pay no process start-up)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" loop "$LOOP"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ -n "${BEFORE:-}" ]; then
    # The old binary's loop knows bare, bwrap, process and linux only.
    echo
    echo "== A/B: $BEFORE then $BIN, loop $LOOP of bare,bwrap,process,linux each, three times"
    for round in 1 2 3; do
        echo "-- round $round, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
        "$BEFORE" loop "$LOOP" | grep -E '^(bwrap|linux) |ratio linux/bwrap' | sed 's/^/before: /'
        "$BIN" loop "$LOOP" bare,bwrap,process,linux | grep -E '^(bwrap|linux) |ratio linux/bwrap' | sed 's/^/after:  /'
    done
fi
