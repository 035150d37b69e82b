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
    .collect()
}
