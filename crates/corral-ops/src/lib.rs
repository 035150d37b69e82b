//! Ops: the `Op` trait, the registry frozen at start-up, the context a handler gets, the
//! built-in ops and `custom:` argv-template ops.
//!
//! **Architecture invariant:** a handler never sees a raw path argument: it gets the
//! `JailedPath`s of the policy's grant, and opens them beneath their root with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`.

pub mod exec;
pub mod files;
pub mod health;
pub mod http;
pub mod replay;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use corral_exec::{Attestation, Backend, BoxFuture};
use corral_policy::{Allowed, Args, Catalog, OpSpec, Principal, codes};

/// What a handler gets: the op, the caller, the arguments, the policy's grant (jailed paths,
/// admitted argv or url, effective limits) and the backend to run commands in.
#[derive(Clone)]
pub struct OpCtx {
    /// The op being called.
    pub op: OpSpec,
    /// The caller.
    pub principal: Principal,
    /// For a delegated caller, the actors behind the call (outermost first); empty otherwise.
    pub act_chain: Vec<String>,
    /// The arguments (already checked against the op's params).
    pub args: Args,
    /// The policy's grant.
    pub grant: Allowed,
    /// Where commands run.
    pub backend: Arc<dyn Backend>,
    /// Directories no op may touch, whatever the grant (corral's state directory).
    pub protected: Vec<std::path::PathBuf>,
    /// The request id, for logs.
    pub request_id: String,
    /// Re-checks a url the op reaches on its own (a redirect target of `http.fetch`) against
    /// the policy: the guard fills it with "decide the same op again with this url". It returns
    /// the canonical admitted url or the refusal. `None` refuses every such url (fails closed).
    pub url_check: Option<http::UrlCheck>,
    /// Where the records of a sandboxed program's connections go (a `network: {allow: [...]}`
    /// run): the guard fills it and writes one audit event per record. `None`: the server's log.
    pub egress_log: Option<corral_exec::EgressLog>,
}

impl fmt::Debug for OpCtx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpCtx")
            .field("op", &self.op)
            .field("principal", &self.principal)
            .field("args", &self.args)
            .field("grant", &self.grant)
            .field("backend", &self.backend)
            .field("protected", &self.protected)
            .field("request_id", &self.request_id)
            .field("url_check", &self.url_check.as_ref().map(|_| "<fn>"))
            .field("egress_log", &self.egress_log)
            .finish()
    }
}

/// A streamed response body (for `files.download`).
pub struct Stream {
    /// The MIME type.
    pub content_type: String,
    /// The length in bytes.
    pub len: u64,
    /// The bytes.
    pub body: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("content_type", &self.content_type)
            .field("len", &self.len)
            .finish()
    }
}

/// What an op returns.
#[derive(Debug)]
pub enum OpOutput {
    /// A JSON result, and the attestation when the op ran a command.
    Json {
        /// The result.
        value: serde_json::Value,
        /// What the backend applied, for exec ops.
        attestation: Option<Attestation>,
    },
    /// A stream of bytes.
    Stream(Stream),
}

/// An op that failed after the policy allowed it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    /// A stable code from `corral_policy::codes`.
    pub code: &'static str,
    /// What happened and what to do, safe to show the caller.
    pub message: String,
}

impl OpError {
    /// An error; its status is the code's in the catalog.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The HTTP status: the catalog's for the code (500 for a code it does not know).
    pub fn status(&self) -> u16 {
        codes::status(self.code)
    }
}

/// One operation.
pub trait Op: Send + Sync + fmt::Debug {
    /// The op's spec (id, effects, params).
    fn spec(&self) -> &OpSpec;
    /// Runs the op. Called only after the guard chain allowed it.
    fn call(&self, ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>>;
}

/// The ops of a deployment, frozen once built.
#[derive(Debug, Clone)]
pub struct Registry {
    catalog: Catalog,
    ops: HashMap<String, Arc<dyn Op>>,
}

impl Registry {
    /// A registry over a catalog, with a handler for every op in it.
    pub fn new(catalog: Catalog, ops: Vec<Arc<dyn Op>>) -> Self {
        let ops = ops
            .into_iter()
            .map(|o| (o.spec().id.to_string(), o))
            .collect();
        Self { catalog, ops }
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The handler of an op.
    pub fn get(&self, id: &str) -> Option<&Arc<dyn Op>> {
        self.ops.get(id)
    }

    /// Every handler.
    pub fn handlers(&self) -> impl Iterator<Item = &Arc<dyn Op>> {
        self.ops.values()
    }
}
