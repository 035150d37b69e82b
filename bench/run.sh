#!/usr/bin/env bash
# Start-to-exit of one sandboxed `/bin/true` from the shell: `corral run` against bubblewrap
# (the issue's whole-root form, and one with a mount set like corral's) and Anthropic's `srt`
# when it is installed, in one hyperfine run per temperature. Every command is a fresh process,
# as an agent's shell tool would start it.
#
#   bench/run.sh                  # RUNS=200 warm runs per command, COLD=5 cold ones (root only)
#   RUNS=500 COLD=10 bench/run.sh
#   SKIP_BUILD=1 bench/run.sh     # use target/release/corral as it is
#   SRT=/path/to/srt bench/run.sh # srt elsewhere than on PATH or in $SRT_DIR/node_modules/.bin
#   PROFILE=1 bench/run.sh        # also strace -f -c and timestamps of one corral run
#
# warm: the page cache holds every binary and library (hyperfine --warmup 10).
# cold: `sync; echo 3 > /proc/sys/vm/drop_caches` before every run (needs root; skipped, and
# said so, otherwise), so each command loads itself and its libraries from disk.
#
# Needs hyperfine and bubblewrap (`apt-get install -y hyperfine bubblewrap`), python3; srt is
# optional (`npm install @anthropic-ai/sandbox-runtime`, which needs `socat` and `ripgrep`).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in hyperfine bwrap python3; do
    command -v "$tool" >/dev/null || {
        echo "run.sh: \`$tool\` is missing (apt-get install -y hyperfine bubblewrap python3)" >&2
        exit 1
    }
done

RUNS=${RUNS:-200}
COLD=${COLD:-5}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

if [ -z "${SKIP_BUILD:-}" ]; then
    cargo build --release --quiet -p corral-cli
fi
CORRAL=$PWD/target/release/corral

# The workspace every command runs in (the current directory for corral's `workspace` profile).
WS=$(mktemp -d)
trap 'rm -rf "$WS"' EXIT
cd "$WS"

# Fail early, with corral's own error, if it cannot isolate here.
"$CORRAL" run --attest -- /bin/true

# bwrap with a mount set like corral's workspace profile: system dirs read-only, /etc, a fresh
# /proc, a minimal /dev, a tmpfs /tmp, the workspace read-write, everything else absent, a new
# session, a cleared environment.
BWRAP_LIKE=(bwrap --unshare-all --die-with-parent --new-session --clearenv
    --setenv PATH /usr/bin:/bin --ro-bind /usr /usr --ro-bind /etc /etc)
for d in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then
        BWRAP_LIKE+=(--symlink "$(readlink "/$d")" "/$d")
    elif [ -d "/$d" ]; then
        BWRAP_LIKE+=(--ro-bind "/$d" "/$d")
    fi
done
BWRAP_LIKE+=(--proc /proc --dev /dev --tmpfs /tmp --bind "$WS" "$WS" --chdir "$WS" /bin/true)

names=(corral bwrap bwrap-like)
cmds=("$CORRAL run -- /bin/true"
    "bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true"
    "${BWRAP_LIKE[*]}")

SRT=${SRT:-$(command -v srt || true)}
if [ -z "$SRT" ] && [ -x "${SRT_DIR:-/tmp/srt}/node_modules/.bin/srt" ]; then
    SRT=${SRT_DIR:-/tmp/srt}/node_modules/.bin/srt
fi
if [ -n "$SRT" ]; then
    # Like corral's workspace profile: writes only to the workspace, home unreadable, no network.
    cat >"$OUT/srt-settings.json" <<JSON
{"filesystem": {"denyRead": ["~"], "allowWrite": ["$WS"], "denyWrite": []},
 "network": {"allowedDomains": [], "deniedDomains": []}}
JSON
    if "$SRT" -s "$OUT/srt-settings.json" /bin/true; then
        names+=(srt)
        cmds+=("$SRT -s $OUT/srt-settings.json /bin/true")
    else
        echo "run.sh: srt is installed but cannot run here (see its error above); left out" >&2
    fi
else
    echo "run.sh: srt not found (npm install @anthropic-ai/sandbox-runtime); left out" >&2
fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs; $(uname -r)"
echo "corral: $("$CORRAL" --version); $(bwrap --version); hyperfine $(hyperfine --version | cut -d' ' -f2)"
for i in "${!names[@]}"; do echo "  ${names[$i]}: ${cmds[$i]}"; done

args=()
for i in "${!names[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done

echo "== warm: hyperfine -N --warmup 10 --runs $RUNS"
hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$OUT/warm.json" "${args[@]}"

if [ "$(id -u)" = 0 ] && [ "$COLD" -gt 0 ]; then
    echo "== cold: drop_caches before each of $COLD runs"
    hyperfine -N --runs "$COLD" --prepare 'sh -c "sync; echo 3 > /proc/sys/vm/drop_caches"' \
        --export-json "$OUT/cold.json" "${args[@]}"
else
    echo "== cold: skipped (needs root to drop the page cache, and COLD > 0)"
fi

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for temp in ("warm", "cold"):
    path = os.path.join(out, f"{temp}.json")
    if not os.path.exists(path):
        continue
    results = {r["command"]: r for r in json.load(open(path))["results"]}
    med = {n: r["median"] * 1000 for n, r in results.items()}
    print(f"\n{temp}: {'command':<11} {'median ms':>10} {'mean ms':>10} {'stddev':>8} {'x bwrap':>8}")
    for n, r in results.items():
        print(f"{temp}: {n:<11} {med[n]:>10.2f} {r['mean'] * 1000:>10.2f} {r['stddev'] * 1000:>8.2f} {med[n] / med['bwrap']:>8.2f}")
    print(f"{temp}: ratio corral/bwrap {med['corral'] / med['bwrap']:.2f} (target <= 2.0), corral/bwrap-like {med['corral'] / med['bwrap-like']:.2f}")
PY

if [ -n "${PROFILE:-}" ]; then
    echo
    echo "== where corral's time goes: strace -f -c of one run"
    strace -f -c -o "$OUT/strace.txt" "$CORRAL" run -- /bin/true || true
    head -25 "$OUT/strace.txt"
    echo "== timestamps (strace -f -tt -e trace=execve,clone,clone3,unshare,exit_group)"
    strace -f -ttt -e trace=execve,clone,clone3,vfork,unshare,pivot_root,exit_group \
        -o "$OUT/strace-tt.txt" "$CORRAL" run -- /bin/true || true
    python3 - "$OUT/strace-tt.txt" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
t0 = float(lines[0].split()[1]) if lines else 0.0
for l in lines:
    parts = l.split(None, 2)
    if len(parts) == 3:
        print(f"{(float(parts[1]) - t0) * 1000:8.2f} ms  pid {parts[0]:>7}  {parts[2][:110]}")
PY
fi
echo "results: $OUT"
