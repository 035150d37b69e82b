//! Which adapter serves an agents-API request, and what its `environment` asks for: the
//! issue's order (path `/agents/<a>/v1/...`, header `X-Corral-Adapter`, `model` equal to an
//! adapter's name, the config's `agents.default`, the only mounted adapter), else
//! `400 agents.adapter_required`. A real model name is the CLI's model; an adapter's name used
//! as `model` (any adapter's) is never passed to a CLI: it gets its default.

use std::path::PathBuf;

use crate::{Adapter, AgentError, codes};

/// What a request says about its adapter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdapterAsk<'a> {
    /// The `<a>` of a `/agents/<a>/v1/...` path.
    pub path: Option<&'a str>,
    /// The `X-Corral-Adapter` header.
    pub header: Option<&'a str>,
    /// The body's `model` (or `agent.model`).
    pub model: Option<&'a str>,
}

/// What the deployment mounts (`agents:` of the config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mounted<'a> {
    /// The adapters, by name.
    pub adapters: &'a [String],
    /// `agents.default`.
    pub default: Option<&'a str>,
}

/// The adapter chosen, and the model its CLI gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// The adapter.
    pub adapter: Adapter,
    /// The real model name for the CLI; `None`: the adapter's default (no model was asked
    /// for, or `model` named the adapter).
    pub model: Option<String>,
    /// Which rule chose it: `path`, `header`, `model`, `default` or `only`.
    pub by: &'static str,
}

fn mounted_adapter(name: &str, mounted: &Mounted<'_>, by: &str) -> Result<Adapter, AgentError> {
    let adapter =
        Adapter::parse(name.trim()).filter(|a| mounted.adapters.iter().any(|m| m == a.name()));
    adapter.ok_or_else(|| {
        AgentError::new(
            codes::AGENTS_ADAPTER_REQUIRED,
            format!(
                "the {by} names the adapter `{}`, which this server does not mount (it mounts: {}); name one of those, or add it to `agents:` in the config",
                crate::events::clean(name),
                list(mounted.adapters)
            ),
        )
    })
}

fn list(adapters: &[String]) -> String {
    if adapters.is_empty() {
        "none".to_owned()
    } else {
        adapters.join(", ")
    }
}

/// The adapter of a request, in the six-case order.
pub fn select(ask: &AdapterAsk<'_>, mounted: &Mounted<'_>) -> Result<Selected, AgentError> {
    let model = ask.model.map(str::trim).filter(|m| !m.is_empty());
    let real_model = |_: Adapter| {
        model
            .filter(|m| Adapter::parse(m).is_none())
            .map(str::to_owned)
    };
    if let Some(p) = ask.path {
        let adapter = mounted_adapter(p, mounted, "path")?;
        return Ok(Selected {
            adapter,
            model: real_model(adapter),
            by: "path",
        });
    }
    if let Some(h) = ask.header {
        let adapter = mounted_adapter(h, mounted, "`X-Corral-Adapter` header")?;
        return Ok(Selected {
            adapter,
            model: real_model(adapter),
            by: "header",
        });
    }
    if let Some(adapter) = model.and_then(Adapter::parse) {
        let adapter = mounted_adapter(adapter.name(), mounted, "`model`")?;
        return Ok(Selected {
            adapter,
            model: None,
            by: "model",
        });
    }
    if let Some(d) = mounted.default {
        let adapter = mounted_adapter(d, mounted, "config's `agents.default`")?;
        return Ok(Selected {
            adapter,
            model: real_model(adapter),
            by: "default",
        });
    }
    if let [only] = mounted.adapters {
        let adapter = mounted_adapter(only, mounted, "config's `agents:`")?;
        return Ok(Selected {
            adapter,
            model: real_model(adapter),
            by: "only",
        });
    }
    Err(AgentError::new(
        codes::AGENTS_ADAPTER_REQUIRED,
        format!(
            "the request does not say which agent adapter runs it and this server mounts {} with no `agents.default`: call `/agents/<adapter>/v1/...`, send `X-Corral-Adapter: <adapter>`, use the adapter's name as `model`, or set `agents: {{default: <adapter>}}`",
            if mounted.adapters.is_empty() {
                "none".to_owned()
            } else {
                format!("several ({})", list(mounted.adapters))
            }
        ),
    ))
}

/// The workdir a session's `environment` asks for: `{type: self_hosted,
/// workspace_directory}` (both optional; no directory: the scope's workdir, `None`). Any other
/// `type` is refused (`agents.environment_unsupported`): corral hosts agents itself.
pub fn environment_workdir(
    environment: Option<&serde_json::Value>,
) -> Result<Option<PathBuf>, AgentError> {
    let Some(env) = environment.filter(|e| !e.is_null()) else {
        return Ok(None);
    };
    let Some(obj) = env.as_object() else {
        return Err(AgentError::new(
            codes::AGENTS_INVALID,
            "`environment` must be an object: `{\"type\": \"self_hosted\", \"workspace_directory\": \"/workspace\"}`",
        ));
    };
    match obj.get("type").and_then(|t| t.as_str()) {
        None | Some("self_hosted") => {}
        Some(other) => {
            return Err(AgentError::new(
                codes::AGENTS_ENVIRONMENT_UNSUPPORTED,
                format!(
                    "`environment.type` is `{}`: corral hosts agents itself, in its sandbox; send `\"type\": \"self_hosted\"` (or omit `environment`)",
                    crate::events::clean(other)
                ),
            ));
        }
    }
    match obj.get("workspace_directory") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(d)) if d.starts_with('/') && !d.contains('\0') => {
            Ok(Some(PathBuf::from(d)))
        }
        Some(_) => Err(AgentError::new(
            codes::AGENTS_INVALID,
            "`environment.workspace_directory` must be an absolute path (the session's workdir, beneath the agent scope's `workdir`)",
        )),
    }
}
