#!/usr/bin/env bash
# bench/gateway.sh: throughput and p99 latency of `POST /ops/core.health` on
#   (a) `corral serve` (release build): static token auth, the full guard chain (resolve, args,
#       policy, limits, execute) and the audit event written to SQLite (WAL, synchronous=FULL)
#       before the answer;
#   (b) the durable baseline, `bare-axum --durable`: a bare axum handler that commits one
#       audit-shaped row per request to SQLite with the same durability and the same group
#       commit, and answers after the commit (the yardstick: the same durable work, no chain);
#   (c) the same two with their SQLite file on tmpfs (no fsync cost: the chain's own overhead);
#   (d) bench/bare-axum without --durable, which writes nothing (for information: the ceiling).
# All run side by side in one invocation, with the same load generator settings, at saturation
# ($CONNS connections) and at a fixed rate ($RATE req/s, oha -q with latency correction, so a
# stall counts for every request it delays). The script prints every figure, the ratios, and
# whether the targets are met (issue 20):
#   corral throughput >= 80% of the durable baseline's, corral p99 <= 1.5x its p99 (disk and
#   tmpfs alike); at the fixed rate corral p99 <= 2 ms and within 0.5 ms of the baseline's.
# It also prints the fsync latency of the disk under the state dirs (bench/fsync-probe.py):
# each call waits for the fsync of the commit that covers it, so that is a floor under p99.
#
# Usage: bench/gateway.sh
# Environment (all optional):
#   DURATION=10s CONNS=64 WARMUP=2s   load per measured run, connections, warm-up per target
#   ROUNDS=1                          measured rounds (corral, bare, corral, bare, ...); the
#                                     median of the rounds is reported
#   TOOL=auto|oha|wrk                 load generator (auto: oha, installing it with
#                                     `cargo install oha --locked`; if that fails, Debian's wrk)
#   RATE=2000 RATE_DURATION=10s       the fixed-rate runs (oha only; wrk has no fixed rate)
#   EXTRA=1                           also run corral in open mode (no token), to show what
#                                     authentication costs
#   PORT_BASE=9201                    first of the ports used on 127.0.0.1
#   SKIP_BUILD=1                      use the release binaries already in target/release
#   KEEP=1                            keep the work directory (configs, logs, SQLite file)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
DURATION=${DURATION:-10s}
RATE=${RATE:-2000}
RATE_DURATION=${RATE_DURATION:-10s}
CONNS=${CONNS:-64}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-1}
TOOL=${TOOL:-auto}
EXTRA=${EXTRA:-0}
PORT_BASE=${PORT_BASE:-9201}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
PATH="$HOME/.cargo/bin:$PATH"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 2; }

# --- load generator -------------------------------------------------------------------------
pick_tool() {
  if [[ $TOOL == auto || $TOOL == oha ]]; then
    if ! command -v oha >/dev/null; then
      say "installing oha (cargo install oha --locked; a few minutes on 2 cores)"
      if ! cargo install oha --locked >&2; then
        [[ $TOOL == oha ]] && die "cargo install oha failed"
        say "cargo install oha failed; falling back to wrk"
      fi
    fi
    if command -v oha >/dev/null; then TOOL=oha; return; fi
  fi
  if ! command -v wrk >/dev/null; then
    say "installing wrk (apt-get install -y wrk)"
    (apt-get install -y wrk || { apt-get update && apt-get install -y wrk; }) >&2 || die "cannot install wrk"
  fi
  TOOL=wrk
}

# run_load URL TOKEN DURATION -> prints "<req/s> <p99 ms> <ok responses> <non-2xx or errors>"
run_load() {
  local url=$1 token=$2 dur=$3
  local auth=()
  [[ -n $token ]] && auth=(-H "Authorization: Bearer $token")
  if [[ $TOOL == oha ]]; then
    local fmt=(--output-format json)
    oha --help 2>/dev/null | grep -q -- '--output-format' || fmt=(--json)
    oha -z "$dur" -c "$CONNS" -m POST -H 'Content-Type: application/json' "${auth[@]}" -d '{}' \
      --no-tui "${fmt[@]}" "$url" |
      python3 -c '
import json, sys
d = json.load(sys.stdin)
s = d["summary"]
codes = d.get("statusCodeDistribution", {})
ok = sum(v for k, v in codes.items() if k.startswith("2"))
# oha cancels the requests in flight when the duration ends ("aborted due to deadline"):
# those are not failures.
errs = {k: v for k, v in d.get("errorDistribution", {}).items() if "deadline" not in k}
bad = sum(v for k, v in codes.items() if not k.startswith("2")) + sum(errs.values())
p99 = d["latencyPercentiles"]["p99"]
rps = s["requestsPerSec"]
print(f"{rps:.0f} {p99 * 1000:.2f} {ok} {bad}")
'
  else
    local lua=$WORK/post.lua
    cat >"$lua" <<'LUA'
wrk.method = "POST"
wrk.body = "{}"
wrk.headers["Content-Type"] = "application/json"
local t = os.getenv("BENCH_TOKEN")
if t and #t > 0 then wrk.headers["Authorization"] = "Bearer " .. t end
done = function(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read
            + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT %.0f %.2f %d %d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(99) / 1000,
    summary.requests - summary.errors.status, bad))
end
LUA
    BENCH_TOKEN=$token wrk -t2 -c "$CONNS" -d "$dur" -s "$lua" "$url" | awk '/^RESULT/ {print $2, $3, $4, $5}'
  fi
}

# --- servers --------------------------------------------------------------------------------
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -n ${WORK:-} && ${KEEP:-0} != 1 ]]; then rm -rf "$WORK"; fi
  if [[ -n ${SHM:-} ]]; then rm -rf "$SHM"; fi
}
trap cleanup EXIT

wait_port() {
  local port=$1 i
  for i in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "nothing listens on 127.0.0.1:$port"
}

# start_corral NAME PORT STATE_DIR TOKEN_OR_EMPTY -> sets URL_<NAME>, TOKEN_<NAME>, PID_<NAME>
start_corral() {
  local name=$1 port=$2 state=$3 token=$4
  local cfg=$WORK/$name.yaml
  {
    printf 'version: 1\npreset: workspace_jail\nroot: %s\nstate_dir: %s\n' "$WORK/ws" "$state"
    if [[ -n $token ]]; then
      printf 'auth:\n  tokens:\n    - {id: bench, token_env: CORRAL_BENCH_TOKEN}\n'
    fi
  } >"$cfg"
  CORRAL_BENCH_TOKEN=$token CORRAL_LOG=warn "$TARGET_DIR/release/corral" serve --config "$cfg" \
    --listen "127.0.0.1:$port" 2>"$WORK/$name.log" &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  printf -v "URL_$name" '%s' "http://127.0.0.1:$port/ops/core.health"
  printf -v "TOKEN_$name" '%s' "$token"
  printf -v "PID_$name" '%s' "$pid"
}

# start_bare NAME PORT [DB_FILE] -> bare-axum, durable with DB_FILE
start_bare() {
  local name=$1 port=$2 db=${3:-}
  local durable=()
  [[ -n $db ]] && durable=(--durable "$db")
  "$TARGET_DIR/release/bare-axum" "127.0.0.1:$port" "${durable[@]}" 2>"$WORK/$name.log" &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  printf -v "URL_$name" '%s' "http://127.0.0.1:$port/ops/core.health"
  printf -v "TOKEN_$name" '%s' ""
  printf -v "PID_$name" '%s' "$pid"
}

# run_rate URL TOKEN -> prints "<p50 ms> <p99 ms> <ok> <bad>" at $RATE req/s for $RATE_DURATION
run_rate() {
  local url=$1 token=$2
  local auth=()
  [[ -n $token ]] && auth=(-H "Authorization: Bearer $token")
  local fmt=(--output-format json)
  oha --help 2>/dev/null | grep -q -- '--output-format' || fmt=(--json)
  oha -z "$RATE_DURATION" -q "$RATE" --latency-correction -c "$CONNS" -m POST \
    -H 'Content-Type: application/json' "${auth[@]}" -d '{}' --no-tui "${fmt[@]}" "$url" |
    python3 -c '
import json, sys
d = json.load(sys.stdin)
codes = d.get("statusCodeDistribution", {})
ok = sum(v for k, v in codes.items() if k.startswith("2"))
errs = {k: v for k, v in d.get("errorDistribution", {}).items() if "deadline" not in k}
bad = sum(v for k, v in codes.items() if not k.startswith("2")) + sum(errs.values())
p50 = d["latencyPercentiles"]["p50"] * 1000
p99 = d["latencyPercentiles"]["p99"] * 1000
print(f"{p50:.3f} {p99:.3f} {ok} {bad}")
'
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# --- main -----------------------------------------------------------------------------------
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
pick_tool
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  say "building release binaries (cargo build --release -p corral-cli -p bare-axum)"
  cargo build --release -p corral-cli -p bare-axum >&2
fi
for b in corral bare-axum; do
  [[ -x $TARGET_DIR/release/$b ]] || die "$TARGET_DIR/release/$b is missing; run without SKIP_BUILD"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/corral-gateway-bench.XXXXXX")
mkdir -p "$WORK/ws"
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')

SHM=$(mktemp -d /dev/shm/corral-bench-state.XXXXXX)
start_corral corral "$PORT_BASE" "$WORK/state" "$TOKEN"
start_bare durable "$((PORT_BASE + 1))" "$WORK/durable.db"
start_corral corral_tmpfs "$((PORT_BASE + 2))" "$SHM/corral" "$TOKEN"
start_bare durable_tmpfs "$((PORT_BASE + 3))" "$SHM/durable.db"
start_bare bare "$((PORT_BASE + 4))"
TARGETS=(corral durable corral_tmpfs durable_tmpfs bare)
if [[ $EXTRA == 1 ]]; then
  start_corral corral_open "$((PORT_BASE + 5))" "$WORK/state-open" ""
  TARGETS+=(corral_open)
fi

say "sanity checks"
for t in "${TARGETS[@]}"; do
  url_var=URL_$t tok_var=TOKEN_$t
  auth=()
  [[ -n ${!tok_var} ]] && auth=(-H "Authorization: Bearer ${!tok_var}")
  body=$(curl -sS -f -X POST -H 'Content-Type: application/json' "${auth[@]}" -d '{}' "${!url_var}") ||
    die "$t does not answer ${!url_var}"
  printf '  %-13s %s\n' "$t" "$body" >&2
done
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d '{}' "$URL_corral")
[[ $code == 401 ]] || die "corral answered $code without a token; auth is not on"
say "corral without a token: 401 (auth is on)"

# The disk's own fsync latency, where corral's SQLite file lives: every call waits for the fsync
# of the commit that covers it, so this is a floor under corral's latency (bench/fsync-probe.py).
FSYNC=$(python3 bench/fsync-probe.py "$WORK" 300 2>&1 || true)
say "$FSYNC"

CLK=$(getconf CLK_TCK)
declare -A RPS P99 OK BAD CPU
for round in $(seq 1 "$ROUNDS"); do
  for t in "${TARGETS[@]}"; do
    url_var=URL_$t tok_var=TOKEN_$t pid_var=PID_$t
    say "round $round/$ROUNDS: $t: warm-up $WARMUP, then $DURATION at $CONNS connections ($TOOL)"
    run_load "${!url_var}" "${!tok_var}" "$WARMUP" >/dev/null
    before=$(cpu_ticks "${!pid_var}")
    read -r rps p99 ok bad < <(run_load "${!url_var}" "${!tok_var}" "$DURATION")
    after=$(cpu_ticks "${!pid_var}")
    # server CPU per request, microseconds
    cpu=$(python3 -c "print(f'{($after - $before) / $CLK * 1e6 / max($ok + $bad, 1):.0f}')")
    printf '  %-13s %8s req/s  p99 %7s ms  2xx %9s  other %s  server CPU %s us/req\n' \
      "$t" "$rps" "$p99" "$ok" "$bad" "$cpu" >&2
    RPS[$t]+="$rps " P99[$t]+="$p99 " OK[$t]+="$ok " BAD[$t]+="$bad " CPU[$t]+="$cpu "
  done
done

declare -A R50 R99 ROK RBAD
if [[ $TOOL == oha ]]; then
  for round in $(seq 1 "$ROUNDS"); do
    for t in corral durable; do
      url_var=URL_$t tok_var=TOKEN_$t
      say "round $round/$ROUNDS: $t: $RATE req/s for $RATE_DURATION (oha -q, latency correction)"
      read -r p50 p99 ok bad < <(run_rate "${!url_var}" "${!tok_var}")
      printf '  %-13s p50 %7s ms  p99 %7s ms  2xx %9s  other %s\n' "$t" "$p50" "$p99" "$ok" "$bad" >&2
      R50[$t]+="$p50 " R99[$t]+="$p99 " ROK[$t]+="$ok " RBAD[$t]+="$bad "
    done
  done
fi

median() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

audited=""
if command -v sqlite3 >/dev/null && [[ -f $WORK/state/corral.db ]]; then
  audited=$(sqlite3 "$WORK/state/corral.db" 'select count(*) from audit_events' 2>/dev/null || true)
fi

echo
echo "Gateway benchmark: POST /ops/core.health, $CONNS connections, $DURATION per run, $ROUNDS round(s), $TOOL"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average at start: $LOAD_BEFORE, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %-13s | %10s | %9s | %12s | %8s | %14s |\n' target 'req/s' 'p99 ms' '2xx' 'non-2xx' 'server us/req'
printf '|%s|%s|%s|%s|%s|%s|\n' --------------- ------------ ----------- -------------- ---------- ----------------
for t in "${TARGETS[@]}"; do
  printf '| %-13s | %10s | %9s | %12s | %8s | %14s |\n' "$t" "$(median "${RPS[$t]}")" \
    "$(median "${P99[$t]}")" "$(median "${OK[$t]}")" "$(median "${BAD[$t]}")" "$(median "${CPU[$t]}")"
done
if [[ $TOOL == oha ]]; then
  echo
  echo "Fixed rate: $RATE req/s for $RATE_DURATION, $CONNS connections, oha -q --latency-correction"
  printf '| %-13s | %9s | %9s | %12s | %8s |\n' target 'p50 ms' 'p99 ms' '2xx' 'non-2xx'
  printf '|%s|%s|%s|%s|%s|\n' --------------- ----------- ----------- -------------- ----------
  for t in corral durable; do
    printf '| %-13s | %9s | %9s | %12s | %8s |\n' "$t" "$(median "${R50[$t]}")" \
      "$(median "${R99[$t]}")" "$(median "${ROK[$t]}")" "$(median "${RBAD[$t]}")"
  done
fi
echo
python3 - "$(median "${RPS[corral]}")" "$(median "${RPS[durable]}")" "$(median "${P99[corral]}")" \
  "$(median "${P99[durable]}")" "$(median "${RPS[corral_tmpfs]}")" "$(median "${RPS[durable_tmpfs]}")" \
  "$(median "${P99[corral_tmpfs]}")" "$(median "${P99[durable_tmpfs]}")" "$(median "${RPS[bare]}")" \
  "$(median "${R99[corral]:-nan}")" "$(median "${R99[durable]:-nan}")" <<'PY'
import math, sys
c, d, cp, dp, ct, dt, ctp, dtp, bare, rc, rd = (float(x) for x in sys.argv[1:])
def met(ok): return "MET" if ok else "MISSED"
print(f"disk:  corral / durable throughput {c / d * 100:.1f}% (target >= 80%: {met(c >= 0.8 * d)}); "
      f"p99 {cp:.2f} / {dp:.2f} ms = {cp / dp:.2f}x (target <= 1.5x: {met(cp <= 1.5 * dp)})")
print(f"tmpfs: corral / durable throughput {ct / dt * 100:.1f}% (target >= 80%: {met(ct >= 0.8 * dt)}); "
      f"p99 {ctp:.2f} / {dtp:.2f} ms = {ctp / dtp:.2f}x (target <= 1.5x: {met(ctp <= 1.5 * dtp)})")
if not math.isnan(rc):
    print(f"fixed rate: corral p99 {rc:.3f} ms (target <= 2 ms: {met(rc <= 2)}), durable p99 {rd:.3f} ms, "
          f"difference {rc - rd:+.3f} ms (target within 0.5 ms: {met(rc - rd <= 0.5)})")
print(f"information: corral / bare (writes nothing) throughput {c / bare * 100:.1f}%, "
      f"durable baseline / bare {d / bare * 100:.1f}%")
PY
echo "this disk (corral's state dir): $FSYNC"
[[ -n $audited ]] && echo "audit events in corral's SQLite store after the run: $audited"
exit 0
