//! Composition root: a loaded config becomes a deployment (engine + op handlers) and an
//! authenticator. The only place that knows every concrete op.

use std::path::PathBuf;
use std::sync::Arc;

use corral_config::Loaded;
use corral_config::model::JwtKey;
use corral_guard::Deployment;
use corral_ops::exec::{CommandsRun, CustomOp};
use corral_ops::files::{FileOp, FileOpKind};
use corral_ops::health::Health;
use corral_ops::http::{FetchConfig, HttpFetch};
use corral_ops::{Op, Registry};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::auth::{Authenticator, JwtConfig};

/// The handlers for every op in the config's catalog.
pub fn registry(loaded: &Loaded) -> Registry {
    let secret_envs = loaded.secret_envs();
    let mut ops: Vec<Arc<dyn Op>> = Vec::new();
    for spec in loaded.catalog.iter() {
        let spec = spec.clone();
        let file = |k| -> Arc<dyn Op> { Arc::new(FileOp::new(spec.clone(), k)) };
        let op: Arc<dyn Op> = match spec.id.as_str() {
            "core.health" => Arc::new(Health::new(spec.clone())),
            "files.list" => file(FileOpKind::List),
            "files.stat" => file(FileOpKind::Stat),
            "files.read" => file(FileOpKind::Read),
            "files.write" => file(FileOpKind::Write),
            "files.delete" => file(FileOpKind::Delete),
            "files.download" => file(FileOpKind::Download),
            "commands.run" => Arc::new(CommandsRun::new(spec.clone(), secret_envs.clone())),
            "http.fetch" => Arc::new(HttpFetch::new(spec.clone(), FetchConfig::default())),
            id => match loaded.config.custom.iter().find(|c| c.id.value == id) {
                Some(c) => Arc::new(CustomOp::new(
                    spec.clone(),
                    c.argv.iter().map(|t| t.value.clone()).collect(),
                    c.cwd.clone(),
                    c.timeout,
                    secret_envs.clone(),
                )),
                None => {
                    tracing::error!(
                        op = id,
                        "op in the catalog has no handler; it will answer 500"
                    );
                    continue;
                }
            },
        };
        ops.push(op);
    }
    Registry::new(loaded.catalog.clone(), ops)
}

/// The deployment of a loaded config.
pub fn deployment(loaded: &Loaded) -> Deployment {
    Deployment {
        engine: loaded.engine(),
        registry: registry(loaded),
        protected: vec![PathBuf::from(&loaded.state_dir)],
    }
}

/// The authenticator of a loaded config.
pub fn authenticator(loaded: &Loaded) -> Result<Authenticator, String> {
    let tokens = loaded
        .tokens
        .iter()
        .map(|t| (t.secret.expose().to_owned(), t.principal.clone()))
        .collect();
    let jwt = match (&loaded.config.auth.jwt, &loaded.jwt_key) {
        (Some(spec), Some(key)) => {
            let (key, algorithm) = match key {
                JwtKey::Hs256(s) => (
                    DecodingKey::from_secret(s.expose().as_bytes()),
                    Algorithm::HS256,
                ),
                JwtKey::Rs256Pem(pem) => (
                    DecodingKey::from_rsa_pem(pem)
                        .map_err(|e| format!("the RS256 public key is not usable: {e}"))?,
                    Algorithm::RS256,
                ),
            };
            Some(JwtConfig {
                key,
                algorithm,
                issuer: spec.issuer.clone(),
                audience: spec.audience.clone(),
                roles_claim: spec.roles_claim.clone(),
                tenant_claim: spec.tenant_claim.clone(),
                service_claim: spec.service_claim.clone(),
            })
        }
        _ => None,
    };
    Ok(Authenticator::new(tokens, jwt))
}
