#!/usr/bin/env python3
"""corral's reliability campaign (issue 20): load, soak and faults against a real `corral serve`.

    bench/reliability/campaign.py load   [--calls 10000] [--clients 32] [--backend sqlite|postgres|both]
    bench/reliability/campaign.py soak   [--minutes 30] [--rate 40] [--backend sqlite|postgres]
    bench/reliability/campaign.py faults [--only pg-restart|disk-full|kill9-consume] [--rounds 20]

Every scenario starts its own server (the binary: --bin, else target/release/corral, else
target/debug/corral) on a free port with its own state directory, and, for PostgreSQL, its own
throwaway cluster (scripts/postgres-test-server). It prints what it measured as a Markdown table
and exits 1 when an invariant broke:

- load: N calls from C clients (files.read, all answered 200): exactly N audit rows for the run,
  one per request id answered, none lost, none duplicated.
- soak: a steady rate of calls from principals that never repeat (HS256 JWTs with a fresh
  `sub` each), mixed ops and refusals; the server's RSS and open file descriptors, sampled every
  30 s, must stay flat (after a minute: descriptors other than sockets within 4 of each other,
  sockets within the clients' connections, the last quarter's median RSS within 10% of the
  second quarter's).
- faults:
  - pg-restart: PostgreSQL stopped and started under load: while it is down calls are refused
    503 (server.audit_unavailable, store.*), they recover without restarting corral, every call answered 200 has its audit
    row, and an approved action retried across the outage ran exactly once.
  - disk-full (root: a 8 MiB tmpfs state dir): a full disk refuses calls with a 503 code rather
    than run them unaudited, and calls recover once space returns.
  - kill9-consume: `kill -9` while an approved action's retry runs, N rounds: the action ran at
    most once, and afterwards its outcome is recorded (a retry answers it `replayed`), it is
    still retryable (a retry runs it, once), or, when the process died holding it, a retry
    (within the 15 s lease) is told it was cut off and may have partly run; never ran-but-lost,
    never a retry left waiting.

Needs Python 3.11+ with httpx and PyJWT (the CI venv has both: target/ci-venv/bin/python).
"""

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import jwt

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "reliability-token-0123456789abcdef0123"
JWT_SECRET = "reliability-jwt-secret-0123456789abcdef"


def log(*a):
    print("==>", *a, file=sys.stderr, flush=True)


def corral_bin(explicit):
    for p in [explicit, ROOT / "target/release/corral", ROOT / "target/debug/corral"]:
        if p and Path(p).is_file():
            return str(p)
    sys.exit("no corral binary: cargo build --release -p corral-cli (or pass --bin)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throwaway cluster from scripts/postgres-test-server, which it can stop and start."""

    def __init__(self):
        out = subprocess.run([str(ROOT / "scripts/postgres-test-server")], capture_output=True, text=True, check=True)
        self.url = out.stdout.strip().splitlines()[-1].split("=", 1)[1]
        self.base = re.search(r"\(cluster in (\S+)\)", out.stderr).group(1)
        self.bindir = next(p for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True) if (p / "pg_ctl").exists())

    def pg_ctl(self, *args):
        cmd = [str(self.bindir / "pg_ctl"), "-D", f"{self.base}/data", *args]
        if os.getuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True)

    def stop(self):
        self.pg_ctl("stop", "-m", "fast")

    def start(self):
        port = self.url.rsplit(":", 1)[1].split("/")[0]
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {self.base}/socket"
        self.pg_ctl("start", "-w", "-l", f"{self.base}/server.log", "-o", opts)

    def psql(self, sql):
        out = subprocess.run([str(self.bindir / "psql"), "-X", "-At", self.url, "-c", sql], capture_output=True, text=True, check=True)
        return [line for line in out.stdout.splitlines() if line]

    def close(self):
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.base, ignore_errors=True)


class Server:
    """`corral serve` with a workspace_jail over its own directory, a static token and JWTs."""

    def __init__(self, binary, work, storage=None, state_dir=None, extra=""):
        self.binary, self.work = binary, Path(work)
        self.ws = self.work / "ws"
        self.ws.mkdir(parents=True, exist_ok=True)
        (self.ws / "notes.txt").write_text("hello\n")
        (self.ws / ".env").write_text("SECRET=1\n")
        self.state = Path(state_dir or self.work / "state")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        store = f"storage: {{url: \"{storage}\"}}\n" if storage else ""
        (self.work / "corral.yaml").write_text(
            "version: 1\n"
            f"preset: {{name: workspace_jail, root: {self.ws}}}\n"
            f"state_dir: {self.state}\n"
            f"{store}"
            "limits: {rate: 1000000/min, concurrency: 256}\n"
            "auth:\n"
            "  tokens:\n"
            "    - {id: loader, roles: [operator], token_env: CORRAL_REL_TOKEN}\n"
            "  jwt: {hs256_secret_env: CORRAL_REL_JWT}\n"
            f"{extra}"
        )
        self.proc = None

    def start(self):
        env = dict(os.environ, CORRAL_REL_TOKEN=TOKEN, CORRAL_REL_JWT=JWT_SECRET, RUST_LOG="warn")
        env.pop("CORRAL_CONFIG", None)
        self.log = open(self.work / "serve.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--config", str(self.work / "corral.yaml"), "--listen", f"127.0.0.1:{self.port}"],
            cwd=self.work, env=env, stdout=self.log, stderr=self.log)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                sys.exit(f"corral serve exited: see {self.work}/serve.log")
            time.sleep(0.1)
        sys.exit("corral serve did not answer /healthz within 60 s")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def rss_kib(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def fds(self):
        """Open descriptors: (sockets, everything else). Sockets follow the clients' connections;
        the rest (files, pipes, eventfds, the database) is what a leak would grow."""
        sockets = other = 0
        base = f"/proc/{self.proc.pid}/fd"
        for fd in os.listdir(base):
            try:
                target = os.readlink(f"{base}/{fd}")
            except OSError:
                continue
            if target.startswith("socket:"):
                sockets += 1
            else:
                other += 1
        return sockets, other

    def audit_ids(self, run, pg=None):
        sql = f"SELECT request_id FROM audit_events WHERE run_id = '{run}'"
        if pg:
            return pg.psql(sql)
        db = next(self.state.glob("*.db"), None) or next(self.state.glob("**/*.sqlite*"), None)
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return [r[0] for r in con.execute(sql)]
        finally:
            con.close()


def headers(run=None, token=TOKEN):
    h = {"Authorization": f"Bearer {token}"}
    if run:
        h["X-Corral-Run"] = run
    return h


# --- load ------------------------------------------------------------------------------------

async def load_once(binary, backend, calls, clients):
    work = Path(tempfile.mkdtemp(prefix="corral-load-"))
    pg = Postgres() if backend == "postgres" else None
    srv = Server(binary, work, storage=pg.url if pg else None)
    srv.start()
    run = f"load-{uuid.uuid4().hex[:12]}"
    answered, statuses = [], {}
    queue = asyncio.Queue()
    for _ in range(calls):
        queue.put_nowait(None)
    started = time.perf_counter()

    async def client():
        async with httpx.AsyncClient(base_url=srv.url, headers=headers(run), timeout=60) as c:
            while not queue.empty():
                queue.get_nowait()
                r = await c.post("/ops/files.read", json={"path": "notes.txt"})
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                answered.append(r.json().get("request_id"))

    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    rows = srv.audit_ids(run, pg)
    srv.stop()
    if pg:
        pg.close()
    shutil.rmtree(work, ignore_errors=True)
    lost = set(answered) - set(rows)
    extra = set(rows) - set(answered)
    dup = len(rows) - len(set(rows))
    ok = statuses.get(200, 0) == calls and len(rows) == calls and not lost and not extra and dup == 0
    return {"backend": backend, "calls": calls, "clients": clients, "answered 200": statuses.get(200, 0),
            "audit rows": len(rows), "lost": len(lost), "unexplained": len(extra), "duplicated": dup,
            "calls/s": round(calls / elapsed), "ok": ok}


def table(rows):
    keys = list(rows[0].keys())
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")


# --- soak ------------------------------------------------------------------------------------

async def soak(binary, backend, minutes, rate):
    work = Path(tempfile.mkdtemp(prefix="corral-soak-"))
    pg = Postgres() if backend == "postgres" else None
    srv = Server(binary, work, storage=pg.url if pg else None)
    srv.start()
    end = time.time() + minutes * 60
    samples, counts, n = [], {}, 0
    calls = [("files.read", {"path": "notes.txt"}), ("files.list", {"path": "."}), ("core.health", {}),
             ("files.read", {"path": ".env"}), ("files.read", {"path": "../etc/passwd"}),
             ("no.such_op", {}), ("files.read", {"nope": 1})]

    async def sampler():
        t0 = time.time()
        while time.time() < end:
            samples.append((round((time.time() - t0) / 60, 1), srv.rss_kib(), *srv.fds()))
            await asyncio.sleep(30)

    async def one(c, i):
        sub = f"user-{uuid.uuid4().hex}"
        token = jwt.encode({"sub": sub, "roles": ["operator"], "exp": int(time.time()) + 600}, JWT_SECRET, algorithm="HS256")
        op, args = calls[i % len(calls)]
        try:
            r = await c.post(f"/ops/{op}", json=args, headers={"Authorization": f"Bearer {token}"})
            key = f"{r.status_code} {r.json().get('code', 'ok')}"
        except httpx.HTTPError as e:
            key = f"error {type(e).__name__}"
        counts[key] = counts.get(key, 0) + 1

    task = asyncio.create_task(sampler())
    async with httpx.AsyncClient(base_url=srv.url, timeout=30, limits=httpx.Limits(max_connections=64)) as c:
        pending = set()
        tick = 1 / rate
        nxt = time.perf_counter()
        while time.time() < end:
            pending.add(asyncio.create_task(one(c, n)))
            n += 1
            pending = {p for p in pending if not p.done()}
            nxt += tick
            await asyncio.sleep(max(0, nxt - time.perf_counter()))
        await asyncio.gather(*pending)
    await task
    srv.stop()
    if pg:
        pg.close()
    print(f"soak: {minutes} min at {rate}/s on {backend}: {n} calls, each from a new principal")
    print("\n| minute | RSS (MiB) | sockets | other fds |\n|---|---|---|---|")
    for m, rss, sockets, other in samples:
        print(f"| {m} | {rss / 1024:.1f} | {sockets} | {other} |")
    print("\n| answer | calls |\n|---|---|")
    for k, v in sorted(counts.items()):
        print(f"| {k} | {v} |")
    # After a minute of warm-up: descriptors other than sockets within 4 of each other, sockets
    # within the clients' 64 connections and the listeners, and RSS not growing: the median of
    # the last quarter within 10% of the second quarter's.
    warm = samples[2:] or samples
    others = [s[3] for s in warm]
    fd_ok = max(others) - min(others) <= 4 and max(s[2] for s in warm) <= 64 + 8
    q = max(1, len(samples) // 4)
    second = statistics.median(s[1] for s in samples[q:2 * q])
    last = statistics.median(s[1] for s in samples[-q:])
    rss_ok = last <= second * 1.10
    print(f"\nRSS median: second quarter {second / 1024:.1f} MiB, last quarter {last / 1024:.1f} MiB")
    errors = sum(v for k, v in counts.items() if k.startswith("error") or k.startswith("5"))
    print(f"\nflat: fds {'yes' if fd_ok else 'NO'}, RSS {'yes' if rss_ok else 'NO'}; transport errors or 5xx: {errors}")
    shutil.rmtree(work, ignore_errors=True)
    return fd_ok and rss_ok and errors == 0


# --- faults ----------------------------------------------------------------------------------

def approve(c, args, run=None):
    """Raises a confirm-tier files.write and approves it (the requester is a person): its id."""
    r = c.post("/ops/files.write", json=args, headers=headers(run))
    assert r.status_code == 202, r.text
    action = r.json()["action_id"]
    d = c.post(f"/confirmations/{action}/decision", json={"decision": "approve"}, headers=headers())
    assert d.status_code == 200, d.text
    return action


async def pg_restart(binary):
    work = Path(tempfile.mkdtemp(prefix="corral-pgfault-"))
    pg = Postgres()
    srv = Server(binary, work, storage=pg.url)
    srv.start()
    run = f"pgfault-{uuid.uuid4().hex[:8]}"
    line = f"once {uuid.uuid4().hex}\n"
    args = {"path": "ledger.txt", "content": line, "append": True}
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        approve(c, args)
    results = []  # (t, status, code, request_id)
    stop_at, start_at, end_at = 4.0, 14.0, 26.0
    t0 = time.perf_counter()

    async def loader():
        async with httpx.AsyncClient(base_url=srv.url, headers=headers(run), timeout=30) as c:
            while time.perf_counter() - t0 < end_at:
                try:
                    r = await c.post("/ops/files.read", json={"path": "notes.txt"})
                    body = r.json()
                    results.append((time.perf_counter() - t0, r.status_code, body.get("code"), body.get("request_id")))
                except httpx.HTTPError as e:
                    results.append((time.perf_counter() - t0, 0, type(e).__name__, None))
                await asyncio.sleep(0.01)

    async def retries():
        # The approved action retried during the outage and after it, 4 at a time.
        outs = []
        async with httpx.AsyncClient(base_url=srv.url, headers=headers(), timeout=30) as c:
            for at in (8.0, 18.0, 20.0):
                await asyncio.sleep(max(0, at - (time.perf_counter() - t0)))
                rs = await asyncio.gather(*(c.post("/ops/files.write", json=args) for _ in range(4)), return_exceptions=True)
                outs += [(at, getattr(r, "status_code", 0), (r.json() if hasattr(r, "json") else {}).get("replayed")) for r in rs]
        return outs

    async def chaos():
        await asyncio.sleep(stop_at)
        await asyncio.to_thread(pg.stop)
        log("PostgreSQL stopped")
        await asyncio.sleep(start_at - stop_at)
        await asyncio.to_thread(pg.start)
        log("PostgreSQL started")

    gathered = await asyncio.gather(retries(), chaos(), *(loader() for _ in range(8)))
    outs = gathered[0]
    ran = (srv.ws / "ledger.txt").read_text().count(line) if (srv.ws / "ledger.txt").exists() else 0
    ok_ids = [r[3] for r in results if r[1] == 200]
    rows = set(srv.audit_ids(run, pg))
    unaudited = [i for i in ok_ids if i not in rows]
    down = [r for r in results if stop_at + 0.5 < r[0] < start_at]
    down_codes = sorted({f"{r[1]} {r[2]}" for r in down})
    after = [r for r in results if r[0] > start_at + 3]
    recovered = bool(after) and all(r[1] == 200 for r in after)
    first_ok = min((r[0] for r in results if r[0] > start_at and r[1] == 200), default=None)
    srv.stop()
    pg.close()
    shutil.rmtree(work, ignore_errors=True)
    ok = bool(not unaudited and ran == 1 and recovered and down and all(c.startswith("503 ") for c in down_codes))
    return {"scenario": "pg-restart", "calls": len(results), "answered 200": len(ok_ids), "200 without audit row": len(unaudited),
            "answers while down": ", ".join(down_codes) or "none", "recovered after (s)": round(first_ok - start_at, 2) if first_ok else "never",
            "approved action ran": ran, "retries": ", ".join(f"{s}{' replayed' if rp else ''}" for _, s, rp in outs), "ok": ok}


async def disk_full(binary):
    if os.getuid() != 0:
        return {"scenario": "disk-full", "ok": True, "note": "skipped: needs root to mount a tmpfs"}
    work = Path(tempfile.mkdtemp(prefix="corral-diskfull-"))
    state = work / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(state)], check=True)
    try:
        srv = Server(binary, work, state_dir=state)
        srv.start()
        run = f"disk-{uuid.uuid4().hex[:8]}"
        filler = state / "filler"
        # Fill the disk but 256 KiB: calls run until the audit's writes fill the rest.
        st = os.statvfs(state)
        left = st.f_bavail * st.f_frsize - 256 * 1024
        with open(filler, "wb") as f:
            f.write(b"\0" * max(0, left))
        results = []
        with httpx.Client(base_url=srv.url, headers=headers(run), timeout=30) as c:
            for _ in range(3000):
                r = c.post("/ops/files.read", json={"path": "notes.txt"})
                results.append((r.status_code, r.json().get("code"), r.json().get("request_id")))
                if r.status_code != 200 and len([x for x in results if x[0] != 200]) >= 50:
                    break
            refused = [x for x in results if x[0] != 200]
            filler.unlink()
            time.sleep(1.5)
            again = [c.post("/ops/files.read", json={"path": "notes.txt"}).status_code for _ in range(20)]
        ok_ids = [x[2] for x in results if x[0] == 200]
        srv.stop()
        rows = set(srv.audit_ids(run))
        unaudited = [i for i in ok_ids if i not in rows]
        codes = sorted({f"{x[0]} {x[1]}" for x in refused})
        ok = bool(refused) and all(c.startswith("503 ") for c in codes) and not unaudited and all(s == 200 for s in again[5:])
        return {"scenario": "disk-full", "calls": len(results), "answered 200": len(ok_ids), "200 without audit row": len(unaudited),
                "refusals": ", ".join(codes) or "none (the disk never filled)", "after space returned": f"{again.count(200)}/20 ok", "ok": ok}
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)
        shutil.rmtree(work, ignore_errors=True)


async def kill9_consume(binary, rounds):
    work = Path(tempfile.mkdtemp(prefix="corral-kill9-"))
    srv = Server(binary, work)
    srv.start()
    outcomes = {"ran once, recorded": 0, "not run, still retryable": 0, "cut off, recorded so": 0,
                "ran twice": 0, "lost": 0}
    slowest = 0.0
    for i in range(rounds):
        line = f"round {i} {uuid.uuid4().hex}\n"
        args = {"path": "ledger.txt", "content": line, "append": True}
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            approve(c, args)
        # The retry that consumes the approval, and `kill -9` 0 to 58 ms after it is sent:
        # the kill lands before, during and after the consume and the run.
        delay = (i % 30) * 0.002

        def retry():
            try:
                httpx.post(f"{srv.url}/ops/files.write", json=args, headers=headers(), timeout=30)
            except httpx.HTTPError:
                pass

        t = threading.Thread(target=retry)
        t.start()
        time.sleep(delay)
        srv.kill9()
        t.join()
        srv.start()
        text = (srv.ws / "ledger.txt").read_text() if (srv.ws / "ledger.txt").exists() else ""
        before = text.count(line)
        # A retry after the restart: the stored outcome, the run, or (the runner died holding
        # the action: its lease runs out within 15 s) "cut off, may have partly run".
        started = time.time()
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            r = c.post("/ops/files.write", json=args, headers=headers())
        waited = time.time() - started
        slowest = max(slowest, waited)
        after = (srv.ws / "ledger.txt").read_text().count(line)
        replayed = r.status_code == 200 and r.json().get("replayed") is True
        cut = r.status_code == 409 and r.json().get("code") == "confirmation.not_replayable"
        if after > 1:
            outcomes["ran twice"] += 1
        elif before == 1 and replayed:
            outcomes["ran once, recorded"] += 1
        elif before == 0 and after == 1 and r.status_code == 200 and not replayed:
            outcomes["not run, still retryable"] += 1
        elif cut and after == before and "cut off" in r.json().get("error", ""):
            outcomes["cut off, recorded so"] += 1
        else:
            outcomes["lost"] += 1
            log(f"round {i}: before {before}, after {after}, retry {r.status_code} {r.text[:200]}")
    srv.stop()
    shutil.rmtree(work, ignore_errors=True)
    ok = outcomes["ran twice"] == 0 and outcomes["lost"] == 0
    return {"scenario": "kill9-consume", "rounds": rounds, **outcomes,
            "slowest retry answer (s)": round(slowest, 1), "ok": ok}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=["load", "soak", "faults"])
    p.add_argument("--bin")
    p.add_argument("--backend", default="both")
    p.add_argument("--calls", type=int, default=10000)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--rate", type=float, default=40)
    p.add_argument("--only")
    p.add_argument("--rounds", type=int, default=30)
    a = p.parse_args()
    binary = corral_bin(a.bin)
    log(f"binary: {binary}")
    if a.scenario == "load":
        backends = ["sqlite", "postgres"] if a.backend == "both" else [a.backend]
        rows = [asyncio.run(load_once(binary, b, a.calls, a.clients)) for b in backends]
        table(rows)
        ok = all(r["ok"] for r in rows)
    elif a.scenario == "soak":
        ok = asyncio.run(soak(binary, "sqlite" if a.backend == "both" else a.backend, a.minutes, a.rate))
    else:
        rows = []
        if a.only in (None, "pg-restart"):
            rows.append(asyncio.run(pg_restart(binary)))
        if a.only in (None, "disk-full"):
            rows.append(asyncio.run(disk_full(binary)))
        if a.only in (None, "kill9-consume"):
            rows.append(asyncio.run(kill9_consume(binary, a.rounds)))
        for r in rows:
            print()
            table([r])
        ok = all(r["ok"] for r in rows)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
