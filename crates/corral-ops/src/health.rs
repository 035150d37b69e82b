//! `core.health`: says the server is up. Mounted for every caller unless a deny rule says no.

use corral_exec::BoxFuture;
use corral_policy::OpSpec;
use serde_json::json;

use crate::{Op, OpCtx, OpError, OpOutput};

/// `core.health`.
#[derive(Debug)]
pub struct Health {
    spec: OpSpec,
}

impl Health {
    /// The op.
    pub fn new(spec: OpSpec) -> Self {
        Self { spec }
    }
}

impl Op for Health {
    fn spec(&self) -> &OpSpec {
        &self.spec
    }

    fn call(&self, _ctx: OpCtx) -> BoxFuture<'_, Result<OpOutput, OpError>> {
        Box::pin(async move {
            Ok(OpOutput::Json {
                value: json!({"status": "ok"}),
                attestation: None,
            })
        })
    }
}
