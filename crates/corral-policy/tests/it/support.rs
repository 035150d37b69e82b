//! Small builders shared by the test modules.

use corral_policy::scope::{CommandScope, CommandScopeSpec, PathScope, PathScopeSpec};
use corral_policy::{
    ArgValue, Args, Catalog, Decision, Engine, Policy, Principal, Request, Selector,
};

/// Parses a selector against the builtin catalog.
pub fn sel(s: &str) -> Selector {
    let Ok(sel) = Selector::parse(s, &Catalog::builtin()) else {
        unreachable!("`{s}` is a valid selector of the builtin catalog")
    };
    sel
}

/// Parses several selectors.
pub fn sels(s: &[&str]) -> Vec<Selector> {
    s.iter().map(|s| sel(s)).collect()
}

/// Compiles a path scope that must be valid.
pub fn path_scope(roots: &[&str], deny: &[&str], readonly: bool) -> PathScope {
    let spec = PathScopeSpec {
        roots: roots.iter().map(|r| (*r).to_owned()).collect(),
        deny: deny.iter().map(|d| (*d).to_owned()).collect(),
        readonly,
        ..PathScopeSpec::default()
    };
    match PathScope::compile(spec) {
        Ok(s) => s,
        Err(e) => unreachable!("test scope {roots:?} should compile: {e}"),
    }
}

/// Compiles a path scope with `unsafe_` set (for the `/` root).
pub fn unsafe_path_scope(roots: &[&str]) -> PathScope {
    let spec = PathScopeSpec {
        roots: roots.iter().map(|r| (*r).to_owned()).collect(),
        unsafe_: true,
        ..PathScopeSpec::default()
    };
    match PathScope::compile(spec) {
        Ok(s) => s,
        Err(e) => unreachable!("unsafe test scope {roots:?} should compile: {e}"),
    }
}

/// Compiles a command scope that must be valid.
pub fn command_scope(spec: CommandScopeSpec) -> CommandScope {
    match CommandScope::compile(spec.clone()) {
        Ok(s) => s,
        Err(e) => unreachable!("test command scope {spec:?} should compile: {e}"),
    }
}

/// Strings to owned strings.
pub fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| (*s).to_owned()).collect()
}

/// Arguments with one `path`.
pub fn path_args(path: &str) -> Args {
    Args::new().str("path", path)
}

/// Arguments of a `files.write`.
pub fn write_args(path: &str) -> Args {
    Args::new().str("path", path).str("content", "hello")
}

/// Arguments of a `commands.run` given as an argv.
pub fn argv_args(argv: &[&str]) -> Args {
    Args::new().with("argv", ArgValue::List(strings(argv)))
}

/// Decides one call.
pub fn decide(engine: &Engine, op: &str, who: &Principal, args: &Args) -> Decision {
    engine.decide(&Request {
        op,
        principal: who,
        args,
    })
}

/// An engine over the builtin catalog.
pub fn engine(policy: Policy) -> Engine {
    Engine::new(Catalog::builtin(), policy)
}

/// The caller most tests use.
pub fn alice() -> Principal {
    Principal::new("alice", &["dev"])
}

/// The index of the rule that allowed, or `None`.
pub fn allowed_by(d: &Decision) -> Option<usize> {
    match d {
        Decision::Allowed(a) => Some(a.rule.index),
        Decision::Denied { .. } | Decision::NotPermitted { .. } | Decision::NotMounted => None,
    }
}

/// The jailed absolute path of an allowed call's `path` argument.
pub fn jailed(d: &Decision) -> Option<String> {
    match d {
        Decision::Allowed(a) => a
            .paths
            .iter()
            .find(|(n, _)| n == "path")
            .map(|(_, p)| p.absolute()),
        Decision::Denied { .. } | Decision::NotPermitted { .. } | Decision::NotMounted => None,
    }
}
