"""The official `openai` SDK's `client.beta.agents` against a real `corral serve` hosting a
codex session (the fake agent CLI installed as codex), with a scripted model provider written
here. Usage: agents_sdk.py CORRAL_BIN FAKE_AGENT_BIN (the whole API), or agents_sdk.py
CORRAL_BIN CODEX_NATIVE_BIN --real-codex (one session of the real codex CLI, installed from its
npm package's tree by hard links), or CORRAL_BIN CLAUDE_NATIVE_BIN --real-claude (the same with
Claude Code, its model behind `llm: {api: anthropic}`), or CORRAL_BIN FAKE_AGENT_BIN --held (a
scope with `confirm_writes_outside`: the held write, its approval by a person, its apply), or
CORRAL_BIN FAKE_AGENT_BIN --replicas POSTGRES_URL (two `corral serve` replicas on one database: a
turn running on one is cancelled through the other), or CORRAL_BIN FAKE_AGENT_BIN --replicas
POSTGRES_URL --held (a write held by a turn on one replica is applied through the other).
Prints one JSON object of what a user sees; the Rust test asserts on it.
"""

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import openai

CORRAL, CLI = sys.argv[1], sys.argv[2]
REAL_CODEX = "--real-codex" in sys.argv[3:]
REAL_CLAUDE = "--real-claude" in sys.argv[3:]
HELD = "--held" in sys.argv[3:]
REPLICAS = sys.argv[4] if sys.argv[3:4] == ["--replicas"] else None
TOKEN = "agents-sdk-alice-token-0123456789"
OTHER = "agents-sdk-bob-token-0123456789ab"
UPSTREAM_KEY = "sk-upstream-secret-agents-sdk"


def call(name, args):
    return {"type": "function_call", "id": "fc", "call_id": "call_" + name, "name": name,
            "arguments": json.dumps(args)}


def message(text):
    return {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}


def anthropic(item, model, stream):
    """The Messages API's answer holding `item` (a function call becomes a `tool_use`)."""
    if item["type"] == "function_call":
        block = {"type": "tool_use", "id": "toolu_%d" % len(Upstream.seen_keys), "name": item["name"], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": item["arguments"]}
        full = dict(block, input=json.loads(item["arguments"]))
        stop = "tool_use"
    else:
        text = item["content"][0]["text"]
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": text}
        full = {"type": "text", "text": text}
        stop = "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 5}
    if not stream:
        return "application/json", json.dumps({
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [full], "stop_reason": stop, "stop_sequence": None, "usage": usage})
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                                              "content": [], "stop_reason": None, "stop_sequence": None,
                                              "usage": {"input_tokens": 10, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]
    return "text/event-stream", "".join("event: %s\ndata: %s\n\n" % (e["type"], json.dumps(e)) for e in events)


class Upstream(http.server.BaseHTTPRequestHandler):
    """`POST /v1/responses`: the next scripted item, streamed as the Responses API does."""

    answers = []
    seen_keys = []
    inputs = []
    # While set, a request waits for `release` (a turn held in progress, deterministically).
    hold = False
    release = threading.Event()

    def log_message(self, *a):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        asked = json.loads(self.rfile.read(length) or b"{}")
        Upstream.seen_keys.append(self.headers.get("authorization")
                                  or "x-api-key " + self.headers.get("x-api-key", ""))
        Upstream.inputs.append(json.dumps(asked.get("input", "")))
        if Upstream.hold:
            Upstream.release.wait(30)
        if asked.get("model") == "filler-model":
            item = message("filler")
        else:
            item = Upstream.answers.pop(0) if Upstream.answers else message("done")
        if self.path.startswith("/v1/messages"):
            ctype, text = anthropic(item, asked.get("model", ""), bool(asked.get("stream")))
            data = text.encode()
            self.send_response(200)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        body = ""
        for ev in [{"type": "response.created", "response": {"id": "r"}},
                   {"type": "response.output_item.done", "item": item},
                   {"type": "response.completed", "response": {"id": "r", "usage": usage}}]:
            body += "event: %s\ndata: %s\n\n" % (ev["type"], json.dumps(ev))
        data = body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_up(port, server, log):
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit("corral serve did not come up: " + open(log.name).read())
            time.sleep(0.1)


def real_cli_session(client, ws, outside, out):
    """One session of the real CLI (codex or Claude Code): a command that writes in the
    workdir, one that writes outside it; what the stream and the disk show."""
    session = client.beta.agents.sessions.create(
        agent={"model": "claude-sonnet-4-5" if REAL_CLAUDE else "gpt-5-codex"},
        environment={"type": "self_hosted", "workspace_directory": ws},
        input="Write made.txt, then try to write outside.")
    types, items = [], []
    for ev in client.beta.agents.sessions.events.stream(session.id):
        types.append(ev.type)
        if ev.type == "agent.session.turn.item.done":
            items.append(ev.item if isinstance(ev.item, dict) else ev.item.to_dict())
        if ev.type == "agent.session.idle":
            break
    out["types"] = types
    out["items"] = items
    out["made"] = open(os.path.join(ws, "made.txt")).read() if os.path.exists(os.path.join(ws, "made.txt")) else None
    out["escaped"] = os.path.exists(os.path.join(outside, "escaped.txt"))
    out["upstream_keys"] = sorted(set(Upstream.seen_keys))


HELD_RULES = """rules:
  - name: agent
    allow: [agents.codex.sessions.create, agents.codex.sessions.send_event,
            agents.codex.sessions.apply_writes, agents.sessions.create]
    confirm: never
    reason: the agent runs unattended; what its scope holds still waits for a person
    agents: {workdir: %s, permissions: workspace-write, confirm_writes_outside: [%s]}
  - name: model
    allow: [llm.chat]
"""


def free_and_held(ws):
    """The model's answers for a turn that writes in `src/` (free) and `README.md` (held)."""
    return [
        call("write_file", {"path": os.path.join(ws, "src", "a.txt"), "content": "free"}),
        call("write_file", {"path": os.path.join(ws, "README.md"), "content": "held"}),
        message("wrote both"),
    ]


def held_item(client, sid, after=None):
    """The pending `held_writes` item of the session's turn (its events read after the event `after`
    until it is idle), the codes of its `error` events, and its last event's id."""
    held, errors, last = None, [], None
    headers = {"Last-Event-ID": after} if after else None
    for ev in client.beta.agents.sessions.events.stream(sid, extra_headers=headers):
        last = ev.event_id
        if ev.type == "agent.session.turn.item.done":
            item = ev.item if isinstance(ev.item, dict) else ev.item.to_dict()
            if item.get("type") == "held_writes" and item.get("status") == "pending_confirmation":
                held = item
        if ev.type == "error":
            errors.append(ev.to_dict().get("error", {}).get("code"))
        if ev.type == "agent.session.idle":
            break
    return held, errors, last


def held_session(client, base, ws, out):
    """A turn that writes in `src/` (free) and `README.md` (held); the hold applied through
    `agents.codex.sessions.apply_writes` once alice, a person, approves that exact call."""
    import httpx
    Upstream.answers = free_and_held(ws)
    session = client.beta.agents.sessions.create(
        agent={"model": "gpt-5-codex"},
        environment={"type": "self_hosted", "workspace_directory": ws}, input="edit")
    held = held_item(client, session.id)[0]
    out["free"] = open(os.path.join(ws, "src", "a.txt")).read()
    out["held_on_disk"] = os.path.exists(os.path.join(ws, "README.md"))
    out["held_item"] = held
    auth = {"authorization": "Bearer " + TOKEN}
    apply = base + "/ops/" + held["apply"]["op"]
    body = dict(held["apply"]["args"], workdir=ws, model="gpt-5-codex")
    first = httpx.post(apply, json=body, headers=auth, timeout=60)
    out["first"] = [first.status_code, first.json().get("code")]
    action = first.json().get("action_id")
    decided = httpx.post(base + "/confirmations/%s/decision" % action, json={"decision": "approve"},
                         headers=auth, timeout=60)
    out["decided"] = decided.status_code
    second = httpx.post(apply, json=body, headers=auth, timeout=120)
    out["second"] = [second.status_code, second.json().get("result", {}).get("applied")]
    out["applied_on_disk"] = open(os.path.join(ws, "README.md")).read() if os.path.exists(os.path.join(ws, "README.md")) else None
    again = httpx.post(apply, json=body, headers=auth, timeout=60)
    out["again"] = [again.status_code, again.headers.get("x-corral-replayed")]


REPLICA_CONFIG = """version: 1
preset: {name: agent_host, permissions: workspace-write, confirm: never}
root: %s
state_dir: %s
storage: {url: "%s"}
guardrails: {confirmations: store, replicas: 2}
agents: [codex]
install: {mode: offline}
llm: {base_url_env: UP_URL, api_key_env: UP_KEY}
auth:
  tokens:
    - {id: alice, token_env: ALICE_TOKEN}
"""


def event_types(base, sid):
    """The session's events so far (the JSON list), as their types."""
    import httpx
    r = httpx.get(base + "/v1/agents/sessions/%s/events" % sid,
                  headers={"authorization": "Bearer " + TOKEN}, timeout=60)
    return [e["type"] for e in r.json()["data"]]


def until_idle(client, sid, after=None):
    """The session's events (type, turn error code) up to its next `agent.session.idle`, after
    the event `after`."""
    seen, last = [], None
    headers = {"Last-Event-ID": after} if after else None
    stream = client.beta.agents.sessions.events.stream(sid, extra_headers=headers)
    for ev in stream:
        d = ev.to_dict()
        seen.append([ev.type, ((d.get("turn") or {}).get("error") or {}).get("code")])
        last = ev.event_id
        if ev.type == "agent.session.idle":
            break
    stream.close()
    return seen, last


def start_replicas(tmp, state, env, config_of, servers):
    """Two `corral serve` replicas, A on `state` and B on a copy of it (each its own state
    directory), configured by `config_of(state_dir)`; appended to `servers` as they start.
    Their base URLs and clients."""
    state_b = os.path.join(tmp, "state-b")
    shutil.copytree(state, state_b)
    clients, bases = [], []
    for name, st in (("a", state), ("b", state_b)):
        config = os.path.join(tmp, "replica-%s.yaml" % name)
        with open(config, "w") as f:
            f.write(config_of(st))
        port = free_port()
        log = open(os.path.join(tmp, "serve-%s.log" % name), "w")
        server = subprocess.Popen([CORRAL, "serve", "--config", config, "--listen", "127.0.0.1:%d" % port],
                                  env=env, stdout=log, stderr=log)
        servers.append(server)
        wait_up(port, server, log)
        bases.append("http://127.0.0.1:%d" % port)
        clients.append(openai.OpenAI(base_url=bases[-1] + "/v1", api_key=TOKEN, max_retries=0, timeout=60))
    return bases, clients


def replicas(tmp, ws, state, env, out):
    """Two replicas on one PostgreSQL, each with its own state directory: a turn runs on A,
    its cancel is posted to B, and A ends it; then a cancel of the idle session changes
    nothing."""
    servers = []
    try:
        bases, (a, b) = start_replicas(tmp, state, env, lambda st: REPLICA_CONFIG % (ws, st, REPLICAS), servers)
        Upstream.hold = True
        session = a.beta.agents.sessions.create(
            agent={"model": "gpt-5-codex"},
            environment={"type": "self_hosted", "workspace_directory": ws}, input="wait for the model")
        deadline = time.time() + 60
        while not Upstream.inputs and time.time() < deadline:
            time.sleep(0.05)
        out["reached_model"] = bool(Upstream.inputs)
        out["status_on_b"] = b.beta.agents.sessions.retrieve(session.id).status
        try:
            b.beta.agents.sessions.events.create(session.id, events=[{"type": "agent.session.input.cancel"}])
            out["cancel"] = 202
        except openai.APIStatusError as e:
            out["cancel"] = [e.status_code, e.response.json().get("code")]
        seen, last = until_idle(b, session.id)
        out["cancelled_events"] = seen
        after = b.beta.agents.sessions.retrieve(session.id)
        out["after"] = [after.status, after.to_dict().get("corral", {}).get("error_code")]
        # The session takes its next turn, here on B, to its end.
        Upstream.hold = False
        Upstream.release.set()
        Upstream.answers = [message("next turn done")]
        b.beta.agents.sessions.events.create(
            session.id, events=[{"type": "agent.session.input.message", "input": "go on"}])
        seen, last = until_idle(b, session.id, last)
        out["next_events"] = [t for t, _ in seen]
        # A cancel of the idle session, on either replica, records nothing.
        before = event_types(bases[0], session.id)
        for c in (a, b):
            c.beta.agents.sessions.events.create(session.id, events=[{"type": "agent.session.input.cancel"}])
        out["idle_cancel_added"] = event_types(bases[1], session.id)[len(before):]
        idle = a.beta.agents.sessions.retrieve(session.id)
        out["idle_after"] = [idle.status, idle.to_dict().get("corral", {}).get("error_code")]
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)


# The replicas' config with the held rules (appended) instead of the preset, and alice an admin
# (she reads the audit).
HELD_REPLICA_CONFIG = REPLICA_CONFIG.replace(
    "preset: {name: agent_host, permissions: workspace-write, confirm: never}\n", "").replace(
    "token_env: ALICE_TOKEN}", "token_env: ALICE_TOKEN, roles: [admin]}")


def approved(base, op, body):
    """`op` called on `base` with `body`: the first call's 202, alice's approval (a person),
    then the call again. Its [status, code] before the approval, and the last answer."""
    import httpx
    auth = {"authorization": "Bearer " + TOKEN}
    first = httpx.post(base + "/ops/" + op, json=body, headers=auth, timeout=60)
    asked = [first.status_code, first.json().get("code")]
    httpx.post(base + "/confirmations/%s/decision" % first.json().get("action_id"),
               json={"decision": "approve"}, headers=auth, timeout=60)
    return asked, httpx.post(base + "/ops/" + op, json=body, headers=auth, timeout=120)


def held_replicas(tmp, ws, state, env, out):
    """Two replicas on one PostgreSQL, each with its own state directory: a turn on A holds a
    write; its apply, approved and called on B, lands once; A then finds it applied."""
    import httpx
    rules = HELD_RULES % (ws, os.path.join(ws, "src"))
    servers = []
    try:
        (base_a, base_b), (a, b) = start_replicas(
            tmp, state, env, lambda st: HELD_REPLICA_CONFIG % (ws, st, REPLICAS) + rules, servers)
        Upstream.answers = free_and_held(ws)
        session = a.beta.agents.sessions.create(
            agent={"model": "gpt-5-codex"},
            environment={"type": "self_hosted", "workspace_directory": ws}, input="edit")
        held, _, last = held_item(a, session.id)
        out["held_status"] = held and held["status"]
        out["held_on_disk"] = os.path.exists(os.path.join(ws, "README.md"))
        # The store keeps the hold: nothing of it stays in A's state directory.
        holds_a = os.path.join(state, "agents", "holds", session.id)
        out["holds_left_on_a"] = os.listdir(holds_a) if os.path.isdir(holds_a) else []
        op = held["apply"]["op"]
        body = dict(held["apply"]["args"], workdir=ws, model="gpt-5-codex")
        asked, applied = approved(base_b, op, body)
        out["on_b"] = [asked, applied.status_code, applied.json().get("result", {}).get("applied")]
        out["applied_on_disk"] = open(os.path.join(ws, "README.md")).read()
        # The same call again, on A: the stored outcome, nothing applied again.
        auth = {"authorization": "Bearer " + TOKEN}
        again = httpx.post(base_a + "/ops/" + op, json=body, headers=auth, timeout=60)
        out["again_on_a"] = [again.status_code, again.headers.get("x-corral-replayed")]
        # Another apply (changed arguments are another action: the workdir with a trailing
        # slash), approved on A: the hold was applied, so it is not found.
        asked, second = approved(base_a, op, dict(body, workdir=ws + "/"))
        out["second_on_a"] = [asked, second.status_code, second.json().get("code")]
        events = httpx.get(base_a + "/v1/agents/sessions/%s/events" % session.id, headers=auth,
                           timeout=60).json()["data"]
        out["hold_items"] = [e["item"]["status"] for e in events
                             if e["type"] == "agent.session.turn.item.done" and e["item"]["type"] == "held_writes"]
        # A turn (on B) whose held changes are over what a hold keeps: nothing of them is
        # kept, and no hold is announced; the error says why.
        Upstream.answers = [call("exec_command", {"cmd": "head -c 70000000 /dev/zero > big.bin"}),
                            message("wrote big.bin")]
        b.beta.agents.sessions.events.create(
            session.id, events=[{"type": "agent.session.input.message", "input": "big"}])
        big, errors, _ = held_item(b, session.id, last)
        out["too_large"] = [big, errors, os.path.exists(os.path.join(ws, "big.bin"))]
        audit = httpx.get(base_b + "/audit", params={"op": op, "limit": "20"}, headers=auth,
                          timeout=60).json()
        out["audit"] = sorted([e.get("outcome"), e.get("code")] for e in audit.get("events", []))
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)


def run_readme_example(base, ws):
    """README.md's `client.beta.agents` example, run as written but for the server's url and
    the workspace; returns what it printed (one event type a line)."""
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "README.md")).read()
    start = readme.index("```python\nimport os\n\nimport openai\n")
    code = readme[start + len("```python\n"):readme.index("```", start + 10)]
    assert "client.beta.agents.sessions.create" in code, code
    code = code.replace("http://127.0.0.1:9000/v1", base + "/v1").replace('"/workspace"', repr(ws))
    Upstream.answers = [call("write_file", {"path": os.path.join(ws, "NOTES.md"), "content": "notes"}),
                        message("added NOTES.md")]
    import contextlib
    import io
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    return {"printed": printed.getvalue().split(), "notes": os.path.exists(os.path.join(ws, "NOTES.md"))}


def link_or_copy(src, dst):
    """A hard link where one may be made (not to another user's file: protected_hardlinks)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def main():
    # Removed when the run passes; a failed run leaves it (its serve.log) to read.
    tmp = tempfile.mkdtemp(prefix="corral-agents-sdk-")
    run(tmp)
    shutil.rmtree(tmp, ignore_errors=True)


def run(tmp):
    ws, state, outside = (os.path.join(tmp, d) for d in ("ws", "state", "outside"))
    for d in (ws, state, outside):
        os.makedirs(d)
    os.chmod(tmp, 0o755)
    os.chmod(outside, 0o777)
    # The fake agent, installed where corral installs codex 0.171.0.
    inst = os.path.join(state, "agents", "codex", "0.171.0")
    bin_dir = os.path.join(inst, "node_modules", "@openai", "codex-linux-x64", "vendor",
                           "x86_64-unknown-linux-musl", "bin")
    if REAL_CLAUDE:
        inst = os.path.join(state, "agents", "claude_code", "2.1.328")
        shutil.copytree(os.path.dirname(CLI),
                        os.path.join(inst, "node_modules", "@anthropic-ai", "claude-code-linux-x64"),
                        copy_function=link_or_copy)
        with open(os.path.join(inst, "corral-install.json"), "w") as f:
            json.dump({"package": "@anthropic-ai/claude-code", "version": "2.1.328"}, f)
    elif REAL_CODEX:
        # The package's whole tree (codex keeps its vendored `rg` beside it), hard-linked.
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(CLI))))
        shutil.copytree(package, os.path.join(inst, "node_modules", "@openai", "codex-linux-x64"),
                        copy_function=link_or_copy)
    else:
        os.makedirs(bin_dir)
        shutil.copy(CLI, os.path.join(bin_dir, "codex"))
    if not REAL_CLAUDE:
        with open(os.path.join(inst, "corral-install.json"), "w") as f:
            json.dump({"package": "@openai/codex", "version": "0.171.0"}, f)

    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    if REAL_CLAUDE:
        Upstream.answers = [
            call("Bash", {"command": "echo in > made.txt", "description": "inside"}),
            call("Bash", {"command": "echo out > %s" % os.path.join(outside, "escaped.txt"),
                          "description": "outside"}),
            message("Both tried."),
        ]
    elif REAL_CODEX:
        Upstream.answers = [
            call("exec_command", {"cmd": "echo in > made.txt", "yield_time_ms": 5000}),
            call("exec_command", {"cmd": "echo out > %s" % os.path.join(outside, "escaped.txt"),
                                  "yield_time_ms": 5000}),
            message("Both tried."),
        ]
    else:
        Upstream.answers = [
            call("write_file", {"path": os.path.join(ws, "made.txt"), "content": "from the agent"}),
            call("write_file", {"path": os.path.join(outside, "escaped.txt"), "content": "nope"}),
            message("wrote made.txt; the other write was refused"),
        ]

    config = os.path.join(tmp, "corral.yaml")
    if HELD:
        os.makedirs(os.path.join(ws, "src"))
        with open(config, "w") as f:
            f.write(
                "version: 1\nroot: %s\nstate_dir: %s\nagents: [codex]\ninstall: {mode: offline}\n"
                "llm: {base_url_env: UP_URL, api_key_env: UP_KEY}\n"
                "auth:\n  tokens:\n    - {id: alice, token_env: ALICE_TOKEN}\n"
                "    - {id: bob, token_env: BOB_TOKEN}\n" % (ws, state)
                + HELD_RULES % (ws, os.path.join(ws, "src")))
    else:
        f = open(config, "w")
        f.write(
            "version: 1\n"
            "preset: {name: agent_host, permissions: workspace-write, confirm: never}\n"
            "root: %s\nstate_dir: %s\n"
            "agents: [%s]\ninstall: {mode: offline}\nprotected: [\"*.lock\"]\n"
            "llm: {base_url_env: UP_URL, api_key_env: UP_KEY, api: %s}\n"
            "auth:\n  tokens:\n"
            "    - {id: alice, token_env: ALICE_TOKEN}\n"
            "    - {id: bob, token_env: BOB_TOKEN}\n"
            % (ws, state, "claude_code" if REAL_CLAUDE else "codex",
               "anthropic" if REAL_CLAUDE else "openai"))
        f.close()
    port = free_port()
    os.environ["CORRAL_TOKEN"] = TOKEN
    env = dict(os.environ, ALICE_TOKEN=TOKEN, BOB_TOKEN=OTHER,
               UP_URL="http://127.0.0.1:%d/v1" % upstream.server_address[1],
               UP_KEY=UPSTREAM_KEY, NO_PROXY="127.0.0.1")
    env.pop("CORRAL_CONFIG", None)
    if REPLICAS:
        out = {}
        try:
            (held_replicas if HELD else replicas)(tmp, ws, state, env, out)
        finally:
            upstream.shutdown()
        print(json.dumps(out))
        return
    log = open(os.path.join(tmp, "serve.log"), "w")
    serve = [CORRAL, "serve", "--config", config, "--listen", "127.0.0.1:%d" % port]
    server = subprocess.Popen(serve, env=env, stdout=log, stderr=log)
    out = {}
    try:
        base = "http://127.0.0.1:%d" % port
        wait_up(port, server, log)
        client = openai.OpenAI(base_url=base + "/v1", api_key=TOKEN, max_retries=0)
        if REAL_CODEX or REAL_CLAUDE:
            real_cli_session(client, ws, outside, out)
            print(json.dumps(out))
            return
        if HELD:
            held_session(client, base, ws, out)
            print(json.dumps(out))
            return
        saved = client.beta.agents.create(model="gpt-5-codex", name="fixer",
                                          instructions="Always answer in French.")
        out["agent_object"] = saved.object if hasattr(saved, "object") else None
        out["agent_listed"] = [a.id for a in client.beta.agents.list()] == [saved.id]
        Upstream.hold = True
        session = client.beta.agents.sessions.create(
            agent_id=saved.id,
            environment={"type": "self_hosted", "workspace_directory": ws},
            input="Write made.txt, then try to write outside.")
        out["session_status"] = session.status
        if session.agent is None:
            raise SystemExit("session create answered: %r" % session.to_dict())
        out["session_model"] = session.agent.model
        # A second message while the turn runs: 409.
        try:
            client.beta.agents.sessions.events.create(
                session.id,
                events=[{"type": "agent.session.input.message",
                         "input": [{"role": "user", "content": [{"type": "input_text", "text": "again"}]}]}])
            out["busy"] = "accepted"
        except openai.APIStatusError as e:
            out["busy"] = [e.status_code, e.response.json().get("code")]
        # At most 4 turns of one owner at once: three more held sessions, then a fifth.
        for _ in range(3):
            client.beta.agents.sessions.create(
                agent={"model": "filler-model"},
                environment={"type": "self_hosted", "workspace_directory": ws}, input="wait")
        try:
            client.beta.agents.sessions.create(
                agent={"model": "filler-model"},
                environment={"type": "self_hosted", "workspace_directory": ws}, input="one too many")
            out["fifth"] = "started"
        except openai.APIStatusError as e:
            out["fifth"] = [e.status_code, e.response.json().get("code")]
        out["sessions_after_fifth"] = len(list(client.beta.agents.sessions.list()))
        Upstream.hold = False
        Upstream.release.set()
        types, items, last_id = [], [], None
        stream = client.beta.agents.sessions.events.stream(session.id)
        for ev in stream:
            types.append(ev.type)
            last_id = ev.event_id
            if ev.type in ("agent.session.turn.failed", "error"):
                out.setdefault("failures", []).append(ev.to_dict())
            if ev.type == "agent.session.turn.item.done":
                items.append(ev.item if isinstance(ev.item, dict) else ev.item.to_dict())
            if ev.type == "agent.session.idle":
                break
        stream.close()
        out["types"] = types
        out["items"] = items
        out["made"] = open(os.path.join(ws, "made.txt")).read() if os.path.exists(os.path.join(ws, "made.txt")) else None
        out["escaped"] = os.path.exists(os.path.join(outside, "escaped.txt"))
        after = client.beta.agents.sessions.retrieve(session.id)
        out["after_status"] = after.status
        out["after_usage"] = after.usage.to_dict() if after.usage else None
        # The second turn: a message, its events after the first turn's.
        Upstream.answers = [message("second turn done")]
        client.beta.agents.sessions.events.create(
            session.id,
            events=[{"type": "agent.session.input.message",
                     "input": [{"role": "user", "content": [{"type": "input_text", "text": "now say done"}]}]}])
        second = []
        stream = client.beta.agents.sessions.events.stream(session.id, extra_headers={"Last-Event-ID": last_id})
        for ev in stream:
            second.append(ev.type)
            if ev.type == "agent.session.idle":
                break
        stream.close()
        out["second"] = second
        # What no agent may change, inside its workdir: a repository's `.git`, a `protected:`
        # glob. And a workdir inside `.git` is refused outright.
        os.makedirs(os.path.join(ws, "repo", ".git", "hooks"))
        with open(os.path.join(ws, "Cargo.lock"), "w") as f:
            f.write("original")
        Upstream.answers = [
            call("write_file", {"path": os.path.join(ws, "repo", ".git", "hooks", "pre-commit"), "content": "#!/bin/sh\ntouch /tmp/pwned\n"}),
            call("write_file", {"path": os.path.join(ws, "Cargo.lock"), "content": "tampered"}),
            # An answer far over the store's cap on one event: kept, cut, never dropped.
            message("\U0001F600" * 17000),
        ]
        guarded = client.beta.agents.sessions.create(
            agent={"model": "gpt-5-codex"},
            environment={"type": "self_hosted", "workspace_directory": ws}, input="tamper")
        stream = client.beta.agents.sessions.events.stream(guarded.id)
        out["long_answer"] = None
        out["refused"] = []
        for ev in stream:
            if ev.type == "agent.session.turn.item.done":
                item = ev.item if isinstance(ev.item, dict) else ev.item.to_dict()
                if item.get("type") == "refused_changes":
                    out["refused"] += [[os.path.basename(c["path"]), c["code"]] for c in item["changes"]]
                if item.get("type") == "message":
                    text = item["content"][0]["text"]
                    out["long_answer"] = [len(text) < 17000, text.endswith("[cut]"), text[:2] == "\U0001F600" * 2]
            if ev.type == "agent.session.idle":
                break
        stream.close()
        out["hook_planted"] = os.path.exists(os.path.join(ws, "repo", ".git", "hooks", "pre-commit"))
        out["lock"] = open(os.path.join(ws, "Cargo.lock")).read()
        try:
            client.beta.agents.sessions.create(
                agent={"model": "gpt-5-codex"},
                environment={"type": "self_hosted", "workspace_directory": os.path.join(ws, "repo", ".git")})
            out["gitdir"] = "created"
        except openai.APIStatusError as e:
            out["gitdir"] = [e.status_code, e.response.json().get("code")]
        # `agents.codex.run`: one task to completion, as a plain op call.
        Upstream.answers = [message("ran to completion")]
        import httpx
        r = httpx.post(base + "/ops/agents.codex.run", json={"task": "say something"},
                       headers={"authorization": "Bearer " + TOKEN}, timeout=120)
        body = r.json()
        out["run"] = [r.status_code, body.get("result", {}).get("ok"), body.get("result", {}).get("final_message"),
                      body.get("result", {}).get("session", {}).get("status")]
        # Another principal sees nothing of alice's.
        bob = openai.OpenAI(base_url=base + "/v1", api_key=OTHER, max_retries=0)
        try:
            bob.beta.agents.sessions.retrieve(session.id)
            out["bob"] = "read it"
        except openai.APIStatusError as e:
            out["bob"] = [e.status_code, e.response.json().get("code")]
        out["bob_list"] = [s.id for s in bob.beta.agents.sessions.list()]
        out["readme"] = run_readme_example(base, ws)
        out["upstream_keys"] = sorted(set(Upstream.seen_keys))
        out["instructions_sent"] = "Always answer in French." in Upstream.inputs[0]
        out["log_has_upstream_key"] = UPSTREAM_KEY in open(log.name).read()
        # A server killed mid-turn: once restarted, the session is failed `agents.interrupted`.
        Upstream.answers = [call("exec_command", {"cmd": "sleep 60"})]
        client.beta.agents.sessions.events.create(
            session.id,
            events=[{"type": "agent.session.input.message", "input": "run the long command"}])
        stream = client.beta.agents.sessions.events.stream(session.id)
        for ev in stream:
            if ev.type == "agent.session.turn.item.added":
                break
        stream.close()
        server.kill()
        server.wait(timeout=10)
        server = subprocess.Popen(serve, env=env, stdout=log, stderr=log)
        wait_up(port, server, log)
        interrupted = client.beta.agents.sessions.retrieve(session.id)
        out["interrupted"] = [interrupted.status, interrupted.to_dict().get("corral", {}).get("error_code")]
    finally:
        server.terminate()
        server.wait(timeout=10)
        upstream.shutdown()
    print(json.dumps(out))


main()
