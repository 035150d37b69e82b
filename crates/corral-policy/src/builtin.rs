//! The built-in op catalog: ids, effects, params and groups (the handlers live in corral-ops).

use crate::op::{Effect, OpId, OpSpec, ParamKind};

fn spec(id: &str, effects: &[Effect], summary: &str) -> Option<OpSpec> {
    OpId::parse(id)
        .ok()
        .map(|id| OpSpec::new(id, effects, summary))
}

fn path() -> ParamKind {
    ParamKind::Path { root: None }
}

/// The built-in ops whose answer is a stream (bytes with a content type), not JSON: what a
/// declarative workflow cannot take as a step's answer (`lab.workflow_streamed_op` at load).
pub const STREAMED_OPS: &[&str] = &["files.download"];

/// Every built-in op.
pub fn builtin_ops() -> Vec<OpSpec> {
    use Effect::{Delete, Exec, Net, Read, Write};
    let methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
        .map(str::to_owned)
        .to_vec();
    [
        spec("core.health", &[Read], "report that the server is up").map(|s| s.group("core")),
        spec("files.list", &[Read], "list a directory").map(|s| {
            s.param("path", path(), false)
                .group("file_ops")
                .group("file_read")
        }),
        spec("files.stat", &[Read], "describe one file or directory").map(|s| {
            s.param("path", path(), true)
                .group("file_ops")
                .group("file_read")
        }),
        spec("files.read", &[Read], "read a file as text").map(|s| {
            s.param("path", path(), true)
                .group("file_ops")
                .group("file_read")
        }),
        spec(
            "files.download",
            &[Read],
            "stream a file with its content type",
        )
        .map(|s| {
            s.param("path", path(), true)
                .group("file_ops")
                .group("file_read")
        }),
        spec("files.write", &[Write], "write a file").map(|s| {
            s.param("path", path(), true)
                .param("content", ParamKind::String, true)
                .param("append", ParamKind::Bool, false)
                .group("file_ops")
                .group("file_write")
        }),
        spec(
            "files.delete",
            &[Delete],
            "delete a file or an empty directory",
        )
        .map(|s| {
            s.param("path", path(), true)
                .group("file_ops")
                .group("file_write")
        }),
        spec(
            "commands.run",
            &[Exec],
            "run a program with an argv, no shell",
        )
        .map(|s| {
            s.param("argv", ParamKind::Argv, false)
                .param("command", ParamKind::CommandLine, false)
                .param("cwd", ParamKind::Cwd, false)
                .param("shell", ParamKind::Bool, false)
                .param("stdin", ParamKind::String, false)
                .group("exec")
        }),
        spec("http.fetch", &[Net], "fetch a url").map(|s| {
            s.param("url", ParamKind::Url, true)
                .param("method", ParamKind::Enum(methods), false)
                .param("body", ParamKind::String, false)
                .group("net")
        }),
        spec(
            "http.download",
            &[Net, Write],
            "fetch a url with GET and save its body to a path (never in the result)",
        )
        .map(|s| {
            s.param("url", ParamKind::Url, true)
                .param("path", ParamKind::Path { root: None }, true)
                .param("overwrite", ParamKind::Bool, false)
                .group("net")
        }),
        spec(
            "llm.chat",
            // Read tier: a completion changes nothing in the world (it is the agent's own
            // reasoning); `net` would make every completion wait for a person's approval and
            // be blocked at L2, the level learning mode runs at. Explicit-only keeps it closed
            // until a rule names it.
            &[Read],
            "ask the configured model provider (the LLM proxy: `POST /v1/chat/completions`, `GET /v1/models`)",
        )
        .map(|s| {
            // Mounted only by a rule that names it: `*` or `effect:net` never opens model spend.
            let mut s = s.param("model", ParamKind::String, false).group("llm");
            s.explicit_only = true;
            s
        }),
    ]
    .into_iter()
    .flatten()
    .chain(agent_ops())
    .collect()
}

/// The ops of the agents host: per adapter `a`, `agents.<a>.run`, `.install`,
/// `.sessions.create`, `.sessions.send_event` and `.sessions.apply_writes` (a person confirms
/// every call: it applies changes the scope held for one), and the generic gate
/// `agents.sessions.create`.
///
/// Running a coding agent runs programs and may change its workdir: `exec` + `write` (confirm
/// tier). Installing one changes the server (`admin`: destructive tier, explicit-only). A session
/// create is explicit-only (spec 004): mounted only by its exact id; every deny selector still
/// reaches it. The agent's own steps (model turns, commands, writes, connections) are recorded
/// in the audit as `agents.<a>.model`, `.exec`, `.write` and `.connect` (see
/// `scope::agent::STEP_KINDS`); they are not ops of the catalog: no rule allows or denies them
/// one by one, the agent scope decides what the agent may do.
fn agent_ops() -> Vec<OpSpec> {
    use Effect::{Admin, Exec, Write};
    let agent = |s: OpSpec| {
        let mut s = s.group("agents");
        s.agent_scoped = true;
        s
    };
    let mut out = Vec::new();
    for a in crate::scope::agent::ADAPTERS {
        let ops = [
            spec(
                &format!("agents.{a}.run"),
                &[Exec, Write],
                &format!("run the {a} agent on one task, to completion, in its sandbox"),
            )
            .map(|s| {
                agent(
                    s.param("task", ParamKind::String, true)
                        .param("model", ParamKind::String, false)
                        .param("workdir", ParamKind::String, false),
                )
            }),
            spec(
                &format!("agents.{a}.install"),
                &[Admin],
                &format!("install the {a} agent's CLI into corral's state directory"),
            )
            .map(|s| s.group("agents")),
            spec(
                &format!("agents.{a}.sessions.create"),
                &[Exec, Write],
                &format!("start a {a} session (also needs `agents.sessions.create`)"),
            )
            .map(|s| {
                let mut s = agent(
                    s.param("model", ParamKind::String, false)
                        .param("workdir", ParamKind::String, false)
                        .param("task", ParamKind::String, false)
                        .param("agent", ParamKind::Word, false)
                        .param("metadata", ParamKind::Json, false),
                );
                s.explicit_only = true;
                s
            }),
            spec(
                &format!("agents.{a}.sessions.apply_writes"),
                &[Write],
                &format!(
                    "apply the changes a {a} session's turn held for a person (its scope's \
                     `confirm_writes_outside`); always confirmed"
                ),
            )
            .map(|s| {
                // Like `send_event`: judged for the session's own workdir and model.
                let mut s = agent(
                    s.param("session", ParamKind::Word, true)
                        .param("hold", ParamKind::Word, true)
                        .param("workdir", ParamKind::String, false)
                        .param("model", ParamKind::String, false),
                );
                s.always_confirmed = true;
                s
            }),
            spec(
                &format!("agents.{a}.sessions.send_event"),
                &[Exec, Write],
                &format!("send an event (a user message, an interrupt) to a {a} session"),
            )
            .map(|s| {
                // `workdir` and `model` are the session's own (the API passes them): the
                // engine judges the rule for the session's real workdir and model, and the
                // runtime refuses a call whose grant is not the session's.
                agent(
                    s.param("session", ParamKind::Word, true)
                        .param("event", ParamKind::Json, true)
                        .param("workdir", ParamKind::String, false)
                        .param("model", ParamKind::String, false),
                )
            }),
        ];
        out.extend(ops.into_iter().flatten());
    }
    let adapters = crate::scope::agent::ADAPTERS
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
    out.extend(
        spec(
            GENERIC_SESSION_GATE,
            &[Exec, Write],
            "the generic gate every agent session needs besides `agents.<a>.sessions.create`",
        )
        .map(|s| {
            let mut s = s
                .param("adapter", ParamKind::Enum(adapters), true)
                .group("agents");
            s.explicit_only = true;
            s
        }),
    );
    out
}

/// The generic gate of agent sessions: `agents.<a>.sessions.create` (and `agents.<a>.run`,
/// which opens a session too) is allowed only when this is allowed for the same caller too.
pub const GENERIC_SESSION_GATE: &str = "agents.sessions.create";

/// The adapter of an op that opens a session (`agents.codex.sessions.create` or
/// `agents.codex.run` -> `codex`).
pub fn session_create_adapter(op: &str) -> Option<&str> {
    // `agents.<a>.run` opens a session too (one a `send_event` may continue): same gate.
    let rest = op.strip_prefix("agents.")?;
    rest.strip_suffix(".sessions.create")
        .or_else(|| rest.strip_suffix(".run"))
        .filter(|a| crate::scope::agent::is_adapter(a))
}
