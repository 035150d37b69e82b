//! Corral's config: `corral.yaml` (or JSON) to a typed config, a catalog and a policy, with
//! diagnostics that say what is wrong, where, and how to fix it; plus the lint behind
//! `corral check-config`.
//!
//! **Architecture invariant:** every refusal is a `Diagnostic` with a catalog code; nothing in
//! this crate panics on any input.

mod build;
mod decode;
pub mod diag;
pub mod lint;
pub mod model;
pub mod protect;
mod reference;
pub mod starter;
pub mod yaml;

#[cfg(test)]
mod no_panic_tests;

use std::path::{Path, PathBuf};

use corral_policy::{Catalog, Engine, Policy, Role, codes};

pub use build::{
    Env, OfflineEnv, ProcessEnv, ResolvedLlm, ResolvedToken, RuleOrigin, upstream_tool_spec,
};
pub use diag::{Diagnostic, Severity, render};
pub use model::{Config, RunConfig, RunProfile, Secret};
pub use reference::{REGENERATE, reference_markdown};

/// A config that loaded without errors.
#[derive(Debug)]
pub struct Loaded {
    /// The file name shown in diagnostics.
    pub file_name: String,
    /// The file's text.
    pub source: String,
    /// The parsed tree (for the secret scan).
    pub tree: yaml::Node,
    /// The typed config.
    pub config: Config,
    /// Built-in plus custom ops.
    pub catalog: Catalog,
    /// The policy: presets, `enable`, `rules`, `disable`, in that order.
    pub policy: Policy,
    /// Where each policy rule came from, aligned with `policy.rules`.
    pub origins: Vec<RuleOrigin>,
    /// Tokens whose secrets were found.
    pub tokens: Vec<ResolvedToken>,
    /// The LLM proxy's upstream (`llm:`), resolved from the environment.
    pub llm: Option<ResolvedLlm>,
    /// The JWT verification key, when `auth.jwt` is configured.
    pub jwt_key: Option<model::JwtKey>,
    /// Corral's state directory, absolute and resolved (no symlink left in it).
    pub state_dir: PathBuf,
    /// Corral's own files (state directory, config file, key files, ...): no op reads or
    /// changes them, and none may lie inside a root some caller can write.
    pub own_files: Vec<protect::OwnFile>,
    /// The directory relative paths in the config are resolved against.
    pub base_dir: PathBuf,
}

impl Loaded {
    /// A path of the config, absolute and lexically normalized (relative to `base_dir`).
    pub fn absolute(&self, p: &str) -> PathBuf {
        build::absolutize(&self.base_dir, p)
    }

    /// The environment variables that hold secrets (token and JWT secrets): never passed to
    /// a child process.
    pub fn secret_envs(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .config
            .auth
            .tokens
            .iter()
            .map(|t| t.token_env.value.clone())
            .collect();
        if let Some(j) = &self.config.auth.jwt
            && let Some(e) = &j.hs256_secret_env
        {
            v.push(e.value.clone());
        }
        if let Some(l) = &self.config.llm {
            v.extend(
                [&l.base_url_env, &l.api_key_env]
                    .into_iter()
                    .flatten()
                    .map(|e| e.value.clone()),
            );
        }
        v
    }

    /// Why RBAC by tier is on for this config, or `None` when it is off: on whenever any
    /// principal can carry a tier role (`viewer`, `operator`, `admin`), so such a role always
    /// means what it says. Checked in this order: a `roles:` block, a static token with a tier
    /// role, `auth.jwt` (a JWT's roles claim can carry one).
    pub fn rbac_cause(&self) -> Option<RbacCause> {
        if self.config.roles.is_some() {
            return Some(RbacCause::RolesBlock);
        }
        let token = self.config.auth.tokens.iter().find_map(|t| {
            t.roles
                .iter()
                .find_map(|r| Role::parse(r))
                .map(|role| RbacCause::TokenTierRole {
                    token: t.id.value.clone(),
                    role,
                })
        });
        token.or_else(|| self.config.auth.jwt.as_ref().map(|_| RbacCause::Jwt))
    }

    /// Compiles the policy into an engine.
    pub fn engine(&self) -> Engine {
        Engine::new(self.catalog.clone(), self.policy.clone())
    }

    /// The ops an unauthenticated caller could call that run programs (`commands.run`, custom
    /// ops, upstream MCP tools), as `` `id` ``: what makes open mode (no tokens, no JWT) unsafe.
    /// `check-config` (`lint.open_mode`) and `corral serve`'s start-up check both ask this.
    pub fn open_mode_risky_ops(&self) -> Vec<String> {
        self.engine()
            .mounted_ops(&corral_policy::Principal::anonymous())
            .into_iter()
            .filter(|op| op.can_run_programs())
            .map(|op| format!("`{}`", op.id))
            .collect()
    }

    /// Renders diagnostics against this file.
    pub fn render(&self, diags: &[Diagnostic]) -> String {
        render(diags, &self.file_name, &self.source)
    }
}

/// Why RBAC by tier is on (see `Loaded::rbac_cause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RbacCause {
    /// The config has a `roles:` block.
    RolesBlock,
    /// A static token carries a tier role.
    TokenTierRole {
        /// The token's id.
        token: String,
        /// Its (first) tier role.
        role: Role,
    },
    /// `auth.jwt` is configured: a JWT's roles claim can carry a tier role.
    Jwt,
}

impl std::fmt::Display for RbacCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RbacCause::RolesBlock => f.write_str("the config has a `roles:` block"),
            RbacCause::TokenTierRole { token, role } => {
                write!(f, "token `{token}` carries the tier role `{role}`")
            }
            RbacCause::Jwt => {
                f.write_str("`auth.jwt` is set, and a JWT's roles claim can carry a tier role")
            }
        }
    }
}

/// A config that did not load: every error found, with the text to render them against.
#[derive(Debug)]
pub struct LoadError {
    /// The file name shown in diagnostics.
    pub file_name: String,
    /// The file's text (empty when it could not be read).
    pub source: String,
    /// Every error (and any warning found on the way).
    pub diagnostics: Vec<Diagnostic>,
}

impl LoadError {
    /// Renders the diagnostics.
    pub fn render(&self) -> String {
        render(&self.diagnostics, &self.file_name, &self.source)
    }
}

/// Loads a config file, reading token secrets from the process environment.
pub fn load_file(path: &Path) -> Result<Loaded, LoadError> {
    load_file_with_env(path, &ProcessEnv)
}

/// Loads a config file, reading token secrets from `env` (`corral run`, which authenticates
/// nobody, passes one that does not read them).
pub fn load_file_with_env(path: &Path, env: &dyn Env) -> Result<Loaded, LoadError> {
    let file_name = path.display().to_string();
    let source = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) => {
            return Err(LoadError {
                file_name: file_name.clone(),
                source: String::new(),
                diagnostics: vec![
                    Diagnostic::error(
                        codes::CONFIG_IO,
                        format!("cannot read `{file_name}`: {e}"),
                        "",
                        None,
                    )
                    .with_fix("check the path, or create one with `corral init`"),
                ],
            });
        }
    };
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let base = std::path::absolute(&base).unwrap_or(base);
    let config_file = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    load_inner(&file_name, &source, &base, Some(&config_file), env)
}

/// Loads a config from text. `base_dir` anchors relative paths (the state directory).
pub fn load_str(
    file_name: &str,
    source: &str,
    base_dir: &Path,
    env: &dyn Env,
) -> Result<Loaded, LoadError> {
    load_inner(file_name, source, base_dir, None, env)
}

fn load_inner(
    file_name: &str,
    source: &str,
    base_dir: &Path,
    config_file: Option<&Path>,
    env: &dyn Env,
) -> Result<Loaded, LoadError> {
    let fail = |diagnostics| LoadError {
        file_name: file_name.to_owned(),
        source: source.to_owned(),
        diagnostics,
    };
    let tree = match yaml::parse(source) {
        Ok(t) => t,
        Err(e) => {
            return Err(fail(vec![Diagnostic::error(
                codes::CONFIG_PARSE,
                format!("the file is not valid YAML or JSON: {}", e.message),
                "",
                Some(e.span),
            )]));
        }
    };
    let mut dec = decode::Decoder::new();
    let config = dec.config(&tree);
    let mut diags = dec.diags;
    if diags.iter().any(|d| d.severity == Severity::Error) {
        return Err(fail(diags));
    }
    let built = build::build(&config, base_dir, config_file, env, &mut diags);
    if diags.iter().any(|d| d.severity == Severity::Error) {
        return Err(fail(diags));
    }
    Ok(Loaded {
        file_name: file_name.to_owned(),
        source: source.to_owned(),
        tree,
        config,
        catalog: built.catalog,
        policy: built.policy,
        origins: built.origins,
        tokens: built.tokens,
        llm: built.llm,
        jwt_key: built.jwt_key,
        state_dir: built.state_dir,
        own_files: built.own,
        base_dir: build::absolutize(
            &std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            &base_dir.to_string_lossy(),
        ),
    })
}
