//! The decision engine: default deny, deny beats allow, a failing check denies.
//!
//! `Engine::new` indexes, per op, the rules whose selectors reach it, so a decision looks only at
//! those. `decide` runs without building a trace; `explain` runs the same code with a tracer.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use crate::codes;
use crate::decision::{
    Allowed, Candidate, Decision, Explanation, RuleRef, TraceOutcome, TraceStep,
};
use crate::hook::{HookCtx, HookOutcome, run_hook};
use crate::limits::Limits;
use crate::op::{Catalog, OpSpec, ParamKind, ScopeKind};
use crate::principal::{Principal, PrincipalSelector};
use crate::protect::{Access, Protected};
use crate::request::{ArgValue, Request};
use crate::resolved::ResolvedCheck;
use crate::rule::{Policy, Rule, RuleEffect};
use crate::scope::agent::refusal_message;
use crate::scope::path::{NormPath, PathScope, PathScopeSpec, is_protected};
use crate::scope::{
    AgentAsk, AgentRefusal, AgentScope, CommandRefusal, PathRefusal, SymlinkMode, UrlRefusal,
};

const HEALTH_OP: &str = "core.health";

struct OpIndex {
    spec: OpSpec,
    /// Deny rules whose selectors reach the op (explicit-only does not shield from a deny).
    deny: Vec<usize>,
    /// Allow rules that mount the op.
    allow: Vec<usize>,
    /// `deny` and `allow` again, filed by the callers they reach, so a decision does not scan
    /// every rule's principals.
    deny_by: ByPrincipal,
    allow_by: ByPrincipal,
    /// `spec.required_scopes()`, computed once.
    required: Vec<ScopeKind>,
    /// For each path param: the op's own root (custom ops), compiled; `Err` if it cannot be.
    own_roots: Vec<Option<Result<PathScope, ()>>>,
}

/// A list of rules (ascending indices) filed for matching a caller: a rule whose principals are
/// all `id:` selectors under each of those ids, every other rule in `general`.
#[derive(Default)]
struct ByPrincipal {
    by_id: HashMap<String, Vec<usize>>,
    general: Vec<usize>,
}

impl ByPrincipal {
    fn new(list: &[usize], rules: &[Rule]) -> Self {
        let mut s = Self::default();
        for &i in list {
            let r = &rules[i];
            let ids_only = !r.principals.is_empty()
                && r.principals
                    .iter()
                    .all(|p| matches!(p, PrincipalSelector::Id(_)));
            if !ids_only {
                s.general.push(i);
                continue;
            }
            for p in &r.principals {
                if let PrincipalSelector::Id(id) = p {
                    let v = s.by_id.entry(id.clone()).or_default();
                    if v.last() != Some(&i) {
                        v.push(i);
                    }
                }
            }
        }
        s
    }

    /// The rules of the list that reach `p`, in order: exactly the list filtered by
    /// `Rule::reaches_principal` (an `id:` selector matches an authenticated caller by id).
    fn reaching<'s>(&'s self, rules: &[Rule], p: &Principal) -> Cow<'s, [usize]> {
        let ids: &[usize] = if p.authenticated {
            self.by_id.get(p.id.as_str()).map_or(&[], Vec::as_slice)
        } else {
            &[]
        };
        if self.general.is_empty() {
            return Cow::Borrowed(ids);
        }
        let reaches = |i: &usize| rules[*i].reaches_principal(p);
        if ids.is_empty() {
            return if self.general.iter().all(reaches) {
                Cow::Borrowed(&self.general)
            } else {
                Cow::Owned(self.general.iter().copied().filter(reaches).collect())
            };
        }
        let mut out = Vec::with_capacity(ids.len() + self.general.len());
        let mut general = self.general.iter().copied().filter(reaches).peekable();
        for &i in ids {
            while let Some(g) = general.next_if(|&g| g < i) {
                out.push(g);
            }
            out.push(i);
        }
        out.extend(general);
        Cow::Owned(out)
    }
}

/// A compiled policy over a catalog. Cheap to share (`Arc` it); decisions take `&self`.
pub struct Engine {
    catalog: Catalog,
    policy: Policy,
    protected: Arc<Protected>,
    index: HashMap<String, OpIndex>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("ops", &self.catalog.len())
            .field("rules", &self.policy.rules.len())
            .finish()
    }
}

/// What a url refusal says: the url and the part of the scope it failed.
fn render_url(r: UrlRefusal, rule: &Rule, prep: &Prepared<'_>) -> String {
    let u = prep.url.unwrap_or("");
    match r {
        UrlRefusal::Invalid => {
            format!("url `{u}` cannot be checked (no host, or credentials in it)")
        }
        UrlRefusal::NotAllowed => format!(
            "url `{u}` is outside hosts [{}] (or its scheme, port or path is)",
            rule.urls
                .as_ref()
                .map(|s| s.spec().hosts.join(", "))
                .unwrap_or_default()
        ),
        UrlRefusal::Private => format!("url `{u}` points at an internal address"),
        UrlRefusal::Method => format!(
            "method `{}` is not among the url scope's methods [{}]",
            prep.method(),
            rule.urls
                .as_ref()
                .map(|s| s.allowed_methods().join(", "))
                .unwrap_or_default()
        ),
    }
}

impl Prepared<'_> {
    /// The call's HTTP method: its `method` argument, `GET` when it has none.
    fn method(&self) -> &str {
        self.method.unwrap_or("GET")
    }
}

/// Arguments of one call, extracted once by parameter kind.
struct Prepared<'a> {
    /// Path params: name, raw value (None if missing and required), pre-normalized if absolute.
    paths: Vec<PathArg<'a>>,
    /// Whether the op takes a command.
    takes_command: bool,
    /// The argv, when the op takes a command and it could be read.
    argv: Option<Cow<'a, [String]>>,
    cwd: Option<&'a str>,
    shell: bool,
    /// Whether the op takes a url.
    takes_url: bool,
    url: Option<&'a str>,
    /// The HTTP method of an op that takes a url (its `method` argument; `GET` when absent).
    method: Option<&'a str>,
    /// For an op that hosts a coding agent: the model and workdir asked for (`Some("\0")` for
    /// a value that is not a string, which no scope admits).
    agent: Option<AgentArgs<'a>>,
}

#[derive(Clone, Copy)]
struct AgentArgs<'a> {
    model: Option<&'a str>,
    workdir: Option<&'a str>,
}

impl<'a> AgentArgs<'a> {
    fn ask(self) -> AgentAsk<'a> {
        AgentAsk {
            model: self.model,
            workdir: self.workdir,
            turns: 0,
        }
    }
}

struct PathArg<'a> {
    name: &'a str,
    raw: Option<&'a str>,
    abs: Option<NormPath<'a>>,
    param_index: usize,
}

/// Why an allow rule did not admit the call. Cheap to build; rendered only when shown.
#[derive(Debug, Clone, Copy)]
enum Failure {
    ScopeRequired(ScopeKind),
    PathMissing(usize),
    Path(usize, PathRefusal),
    Protected(usize),
    OwnRoot(usize),
    Readonly,
    ArgvInvalid,
    Command(CommandRefusal),
    UrlMissing,
    Url(UrlRefusal),
    Agent(AgentRefusal),
}

impl Failure {
    fn code(self) -> &'static str {
        match self {
            Failure::ScopeRequired(_) => codes::POLICY_SCOPE_REQUIRED,
            Failure::PathMissing(_) | Failure::ArgvInvalid | Failure::UrlMissing => {
                codes::POLICY_ARG_INVALID
            }
            Failure::Path(_, r) => r.code(),
            Failure::Protected(_) => codes::POLICY_PATH_DENIED,
            Failure::OwnRoot(_) => codes::POLICY_PATH_OUTSIDE_SCOPE,
            Failure::Readonly => codes::POLICY_READONLY,
            Failure::Command(r) => r.code(),
            Failure::Url(r) => r.code(),
            Failure::Agent(r) => r.code(),
        }
    }

    /// How far the call got into the rule: the candidate that got furthest is the closest.
    fn depth(self) -> u8 {
        match self {
            Failure::ScopeRequired(_) => 0,
            Failure::PathMissing(_) | Failure::ArgvInvalid | Failure::UrlMissing => 1,
            Failure::Path(_, PathRefusal::Invalid | PathRefusal::OutsideRoots)
            | Failure::OwnRoot(_)
            | Failure::Command(CommandRefusal::NotAllowed)
            | Failure::Url(UrlRefusal::NotAllowed | UrlRefusal::Invalid)
            | Failure::Agent(_) => 2,
            Failure::Path(_, PathRefusal::Denied)
            | Failure::Protected(_)
            | Failure::Command(
                CommandRefusal::Denied | CommandRefusal::Cwd | CommandRefusal::Shell,
            )
            | Failure::Url(UrlRefusal::Private | UrlRefusal::Method) => 3,
            Failure::Readonly => 4,
        }
    }

    fn render(self, rule: &Rule, prep: &Prepared<'_>, ix: &OpIndex) -> String {
        let path = |i: usize| {
            prep.paths
                .get(i)
                .map(|p| (p.name, p.raw.unwrap_or("")))
                .unwrap_or(("path", ""))
        };
        // The roots the argument was checked against: the rule's path scope, else the roots
        // the op declares for that parameter (a custom op's own).
        let roots = |i: usize| {
            let own = prep
                .paths
                .get(i)
                .and_then(|p| ix.own_roots.get(p.param_index))
                .and_then(Option::as_ref)
                .and_then(|r| r.as_ref().ok());
            rule.paths
                .as_ref()
                .or(own)
                .map(|s| s.spec().roots.join(", "))
                .unwrap_or_default()
        };
        match self {
            Failure::ScopeRequired(k) => format!(
                "the rule allows an op that takes a {} argument but has no `{}:` scope",
                match k {
                    ScopeKind::Paths => "path",
                    ScopeKind::Commands => "command",
                    ScopeKind::Urls => "url",
                    ScopeKind::Agents => "coding agent",
                },
                k.key()
            ),
            Failure::Agent(r) => match (rule.agents.as_ref(), prep.agent) {
                (Some(scope), Some(args)) => refusal_message(r, scope, &args.ask()),
                _ => "the agent scope refused the session".to_owned(),
            },
            Failure::PathMissing(i) => format!("argument `{}` is missing", path(i).0),
            Failure::Path(i, PathRefusal::Invalid) => {
                let (n, v) = path(i);
                format!("argument `{n}` = `{v}` is not a path that can be checked")
            }
            Failure::Path(i, PathRefusal::OutsideRoots) => {
                let (n, v) = path(i);
                format!("argument `{n}` = `{v}` is outside the roots [{}]", roots(i))
            }
            Failure::Path(i, PathRefusal::Denied) => {
                let (n, v) = path(i);
                let deny = rule
                    .paths
                    .as_ref()
                    .map(|s| s.spec().deny.join(", "))
                    .unwrap_or_default();
                format!("argument `{n}` = `{v}` matches a deny pattern [{deny}]")
            }
            Failure::Protected(i) => {
                let (n, v) = path(i);
                format!(
                    "argument `{n}` = `{v}` is in a protected location (/proc, /sys, /dev; \
                     corral's state, config and key files; and for an op that changes files, \
                     `.git`, `.corral` and the config's `protected:` list)"
                )
            }
            Failure::OwnRoot(i) => {
                let (n, v) = path(i);
                format!("argument `{n}` = `{v}` is outside the root the op declares")
            }
            Failure::Readonly => "the path scope is read-only and the op writes".to_owned(),
            Failure::ArgvInvalid => {
                "the command cannot be read as an argv (unbalanced quotes?)".to_owned()
            }
            Failure::Command(r) => {
                let argv = prep
                    .argv
                    .as_deref()
                    .map(|a| a.join(" "))
                    .unwrap_or_default();
                let spec = rule.commands.as_ref().map(|c| c.spec());
                match r {
                    CommandRefusal::Shell => {
                        "the call asks for a shell; the scope has `shell: false`".to_owned()
                    }
                    CommandRefusal::Cwd => format!(
                        "cwd `{}` is outside the scope's cwd `{}`",
                        prep.cwd.unwrap_or(""),
                        spec.and_then(|s| s.cwd.clone())
                            .unwrap_or_else(|| "(none)".to_owned())
                    ),
                    CommandRefusal::Denied => format!(
                        "argv `{argv}` matches a deny pattern [{}]",
                        spec.map(|s| s.deny.join(", ")).unwrap_or_default()
                    ),
                    CommandRefusal::NotAllowed => format!(
                        "argv `{argv}` matches none of [{}]",
                        spec.map(|s| s.allow.join(", ")).unwrap_or_default()
                    ),
                }
            }
            Failure::UrlMissing => "argument `url` is missing".to_owned(),
            Failure::Url(r) => render_url(r, rule, prep),
        }
    }
}

trait Tracer {
    const ON: bool;
    fn outcome(&mut self, rule: usize, outcome: TraceOutcome);
    fn note(&mut self, note: String);
    /// Takes in the trace of the generic session gate: its rules' outcomes where this trace
    /// has none, and its notes.
    fn merge_gate(&mut self, _gate: FullTrace, _decision: &Decision) {}
}

struct NoTrace;

impl Tracer for NoTrace {
    const ON: bool = false;
    fn outcome(&mut self, _: usize, _: TraceOutcome) {}
    fn note(&mut self, _: String) {}
}

#[derive(Default)]
struct FullTrace {
    outcomes: HashMap<usize, TraceOutcome>,
    notes: Vec<String>,
}

impl Tracer for FullTrace {
    const ON: bool = true;
    fn outcome(&mut self, rule: usize, outcome: TraceOutcome) {
        self.outcomes.insert(rule, outcome);
    }
    fn note(&mut self, note: String) {
        self.notes.push(note);
    }
    fn merge_gate(&mut self, gate: FullTrace, decision: &Decision) {
        for (i, o) in gate.outcomes {
            self.outcomes.entry(i).or_insert(o);
        }
        let gate_op = crate::builtin::GENERIC_SESSION_GATE;
        self.notes.push(match decision {
            Decision::Allowed(a) => {
                format!("second gate `{gate_op}`: allowed by rule `{}`", a.rule.name)
            }
            other => format!(
                "second gate `{gate_op}`: {}",
                other.kind().replace('_', " ")
            ),
        });
        self.notes.extend(
            gate.notes
                .into_iter()
                .map(|n| format!("gate `{gate_op}`: {n}")),
        );
    }
}

impl Engine {
    /// Compiles a policy over a catalog.
    pub fn new(catalog: Catalog, policy: Policy) -> Self {
        let protected = Arc::new(policy.protected.clone());
        let mut index = HashMap::with_capacity(catalog.len());
        for spec in catalog.iter() {
            let mut deny = Vec::new();
            let mut allow = Vec::new();
            for (i, r) in policy.rules.iter().enumerate() {
                match r.effect {
                    RuleEffect::Deny if r.selectors.iter().any(|s| s.reaches(spec)) => deny.push(i),
                    RuleEffect::Allow if r.mounts(spec) => allow.push(i),
                    RuleEffect::Deny | RuleEffect::Allow => {}
                }
            }
            let own_roots = spec
                .params
                .iter()
                .filter_map(|p| match &p.kind {
                    ParamKind::Path { root } => Some(root.as_ref().map(|r| {
                        PathScope::compile(PathScopeSpec {
                            roots: vec![r.clone()],
                            ..PathScopeSpec::default()
                        })
                        .map_err(|_| ())
                    })),
                    _ => None,
                })
                .collect();
            index.insert(
                spec.id.to_string(),
                OpIndex {
                    spec: spec.clone(),
                    deny_by: ByPrincipal::new(&deny, &policy.rules),
                    allow_by: ByPrincipal::new(&allow, &policy.rules),
                    deny,
                    allow,
                    own_roots,
                    required: spec.required_scopes(),
                },
            );
        }
        Self {
            catalog,
            policy,
            protected,
            index,
        }
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Decides a call.
    pub fn decide(&self, req: &Request<'_>) -> Decision {
        self.evaluate(req, &mut NoTrace)
    }

    /// Decides a call and explains why, naming every rule and what happened to it.
    pub fn explain(&self, req: &Request<'_>) -> Explanation {
        let mut t = FullTrace::default();
        let decision = self.evaluate(req, &mut t);
        let op = self.catalog.get(req.op);
        let trace = self
            .policy
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| TraceStep {
                rule: RuleRef {
                    index: i,
                    name: r.name.clone(),
                },
                effect: r.effect,
                outcome: t.outcomes.remove(&i).unwrap_or_else(|| {
                    TraceOutcome::OpNotSelected(match op {
                        None => format!("`{}` is not an op", req.op),
                        Some(spec) if r.selectors.iter().any(|s| s.reaches(spec)) => format!(
                            "`{}` is explicit-only: an allow mounts it only by its exact id",
                            spec.id
                        ),
                        Some(spec) => format!(
                            "selectors [{}] do not reach `{}`",
                            r.selectors
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(", "),
                            spec.id
                        ),
                    })
                }),
            })
            .collect();
        Explanation {
            decision,
            trace,
            notes: t.notes,
        }
    }

    /// The ops `principal` may call at all (mounted, and not wholly denied), by id.
    pub fn mounted_ops(&self, principal: &Principal) -> Vec<&OpSpec> {
        self.catalog
            .iter()
            .filter(|spec| self.is_mounted(spec.id.as_str(), principal))
            .collect()
    }

    /// Whether `op` is mounted for `principal` and not denied to them outright.
    pub fn is_mounted(&self, op: &str, principal: &Principal) -> bool {
        // A session create is callable only when the generic gate is too.
        let gate_open = crate::builtin::session_create_adapter(op)
            .is_none_or(|_| self.is_mounted(crate::builtin::GENERIC_SESSION_GATE, principal));
        self.is_mounted_before_gate(op, principal) && gate_open
    }

    /// [`Engine::is_mounted`] without the generic session gate: what the guard chain resolves
    /// a call against, so an adapter's session create whose gate is closed reaches the
    /// decision and is refused there with `agents.session_gate` (saying which gate to open),
    /// not as an op that does not exist. Listings use `is_mounted`.
    pub fn is_mounted_before_gate(&self, op: &str, principal: &Principal) -> bool {
        let Some(ix) = self.index.get(op) else {
            return false;
        };
        let wholly_denied = ix.deny.iter().any(|&i| {
            let r = &self.policy.rules[i];
            !r.is_scoped() && r.reaches_principal(principal)
        });
        let mounted = op == HEALTH_OP
            || ix
                .allow
                .iter()
                .any(|&i| self.policy.rules[i].reaches_principal(principal));
        mounted && !wholly_denied
    }

    /// The effective limits when `rule` decides for `spec` (global, rule, scopes).
    fn limits_for(&self, rule: Option<&Rule>) -> Limits {
        let mut l = self.policy.limits;
        if let Some(r) = rule {
            l = l.min(&r.limits);
            if let Some(p) = &r.paths {
                l = l.min(&Limits {
                    max_bytes: p.spec().max_bytes,
                    ..Limits::NONE
                });
            }
            if let Some(c) = &r.commands {
                l = l.min(&Limits {
                    timeout: c.spec().timeout,
                    max_output_bytes: c.spec().max_output_bytes,
                    ..Limits::NONE
                });
            }
        }
        l
    }

    fn prepare<'a>(spec: &'a OpSpec, req: &Request<'a>) -> Prepared<'a> {
        let args = req.args;
        let mut p = Prepared {
            paths: Vec::new(),
            takes_command: false,
            argv: None,
            cwd: None,
            shell: false,
            takes_url: false,
            url: None,
            method: None,
            agent: None,
        };
        if spec.agent_scoped {
            let text = |name: &str| match args.get(name) {
                Some(ArgValue::Str(s)) => Some(s.as_str()),
                Some(_) => Some("\0"),
                None => None,
            };
            let takes = |name: &str| spec.params.iter().any(|p| p.name == name);
            p.agent = Some(AgentArgs {
                model: takes("model").then(|| text("model")).flatten(),
                workdir: takes("workdir").then(|| text("workdir")).flatten(),
            });
        }
        let mut path_index = 0;
        for param in &spec.params {
            match &param.kind {
                ParamKind::Path { .. } => {
                    let raw = match args.get(&param.name) {
                        Some(ArgValue::Str(s)) => Some(s.as_str()),
                        Some(_) => Some("\0"),
                        None if param.required => None,
                        None => Some("."),
                    };
                    p.paths.push(PathArg {
                        name: &param.name,
                        raw,
                        abs: raw.and_then(NormPath::new),
                        param_index: path_index,
                    });
                    path_index += 1;
                }
                ParamKind::Argv => {
                    p.takes_command = true;
                    if let Some(ArgValue::List(v)) = args.get(&param.name) {
                        p.argv = Some(Cow::Borrowed(v.as_slice()));
                    }
                }
                ParamKind::CommandLine => {
                    p.takes_command = true;
                    if let Some(ArgValue::Str(s)) = args.get(&param.name) {
                        p.argv = shlex::split(s).map(Cow::Owned);
                    }
                }
                ParamKind::Cwd => {
                    p.takes_command = true;
                    p.cwd = args.get_str(&param.name);
                }
                ParamKind::Url => {
                    p.takes_url = true;
                    p.url = args.get_str(&param.name);
                    // Only an op that takes a method is judged by one (`http.download` GETs).
                    if spec.params.iter().any(|q| q.name == "method") {
                        p.method = args.get_str("method");
                    }
                }
                ParamKind::Bool if param.name == "shell" => {
                    p.shell = matches!(args.get("shell"), Some(ArgValue::Bool(true)));
                }
                ParamKind::Bool
                | ParamKind::Int
                | ParamKind::Word
                | ParamKind::String
                | ParamKind::Enum(_)
                | ParamKind::Json => {}
            }
        }
        p
    }

    /// Resolves path arg `i` for `scope`: the pre-normalized absolute form, or the relative
    /// form anchored at the scope's first root.
    fn resolve<'a>(
        arg: &'a PathArg<'a>,
        scope: &'a PathScope,
        principal: &'a Principal,
    ) -> Result<Cow<'a, NormPath<'a>>, PathRefusal> {
        match (&arg.abs, arg.raw) {
            (Some(abs), _) => Ok(Cow::Borrowed(abs)),
            (None, Some(raw)) => scope.anchor(raw, principal).map(Cow::Owned),
            (None, None) => Err(PathRefusal::Invalid),
        }
    }

    /// Checks one allow rule's clauses against the call.
    fn check_allow(
        &self,
        ix: &OpIndex,
        rule: &Rule,
        prep: &Prepared<'_>,
        principal: &Principal,
    ) -> Result<(), Failure> {
        for &kind in &ix.required {
            let present = match kind {
                ScopeKind::Paths => rule.paths.is_some(),
                ScopeKind::Commands => rule.commands.is_some(),
                ScopeKind::Urls => rule.urls.is_some(),
                ScopeKind::Agents => rule.agents.is_some(),
            };
            if !present {
                return Err(Failure::ScopeRequired(kind));
            }
        }
        if let (Some(scope), Some(args)) = (&rule.agents, prep.agent) {
            Self::check_agent(scope, args, principal).map_err(Failure::Agent)?;
        }
        for (i, arg) in prep.paths.iter().enumerate() {
            if arg.raw.is_none() {
                return Err(Failure::PathMissing(i));
            }
            let own = ix.own_roots.get(arg.param_index).and_then(Option::as_ref);
            let scope = match (&rule.paths, own) {
                // An op root that cannot be compiled cannot be checked, with or without the
                // rule's own scope: a failing check denies.
                (_, Some(Err(()))) => return Err(Failure::OwnRoot(i)),
                (Some(s), _) => s,
                (None, Some(Ok(s))) => s,
                (None, None) => return Err(Failure::ScopeRequired(ScopeKind::Paths)),
            };
            let path = Self::resolve(arg, scope, principal).map_err(|r| Failure::Path(i, r))?;
            scope
                .admit(&path, principal)
                .map_err(|r| Failure::Path(i, r))?;
            let access = if ix.spec.effective_effects().mutates_files() {
                Access::Change
            } else {
                Access::Read
            };
            if is_protected(&path.parts, &[])
                || self.protected.hit_for(&path.absolute, access).is_some()
            {
                return Err(Failure::Protected(i));
            }
            if let (Some(_), Some(Ok(own))) = (&rule.paths, own) {
                own.admit(&path, principal)
                    .map_err(|_| Failure::OwnRoot(i))?;
            }
        }
        if let Some(scope) = &rule.paths
            && scope.spec().readonly
            && ix.spec.effective_effects().mutates_files()
        {
            return Err(Failure::Readonly);
        }
        if prep.takes_command {
            let argv = prep.argv.as_deref().ok_or(Failure::ArgvInvalid)?;
            if let Some(scope) = &rule.commands {
                scope
                    .check(argv, prep.cwd, prep.shell)
                    .map_err(Failure::Command)?;
            }
        }
        if prep.takes_url {
            let url = prep.url.ok_or(Failure::UrlMissing)?;
            if let Some(scope) = &rule.urls {
                scope.check(url, prep.method()).map_err(Failure::Url)?;
            }
        }
        Ok(())
    }

    /// The agent scope's checks a call can make before the session runs: the model and the
    /// workdir (the turn count is the runtime's, with `AgentScope::check`).
    fn check_agent(
        scope: &AgentScope,
        args: AgentArgs<'_>,
        principal: &Principal,
    ) -> Result<(), AgentRefusal> {
        if !scope.model_allowed(args.model) {
            return Err(AgentRefusal::ModelNotAllowed);
        }
        if scope.admit_workdir(args.workdir, principal).is_none() {
            return Err(AgentRefusal::WorkdirOutside);
        }
        Ok(())
    }

    /// The agent scope of the rule that allowed a call (an op of `agents.<a>.*`), which the
    /// runtime builds the session's sandbox from and checks each turn against
    /// (`AgentScope::check`); `None` for any other grant.
    pub fn agent_scope(&self, allowed: &Allowed) -> Option<&AgentScope> {
        self.policy
            .rules
            .get(allowed.rule.index)
            .filter(|r| r.name == allowed.rule.name)
            .and_then(|r| r.agents.as_ref())
    }

    /// Builds the grant of the deciding allow rule (its clauses already passed), and returns
    /// with it the granted paths in normalized form (the same paths, in the same order, as
    /// `paths` of the grant).
    fn grant<'p>(
        &self,
        ix: &'p OpIndex,
        rule: Option<(usize, &'p Rule)>,
        prep: &'p Prepared<'_>,
        principal: &'p Principal,
    ) -> (Allowed, Vec<Cow<'p, NormPath<'p>>>) {
        let mut paths = Vec::with_capacity(prep.paths.len());
        let mut resolved = Vec::with_capacity(prep.paths.len());
        let r = rule.map(|(_, r)| r);
        for arg in &prep.paths {
            let own = ix.own_roots.get(arg.param_index).and_then(Option::as_ref);
            let scope = match (r.and_then(|r| r.paths.as_ref()), own) {
                (Some(s), _) | (None, Some(Ok(s))) => s,
                (None, Some(Err(()))) | (None, None) => continue,
            };
            let Ok(path) = Self::resolve(arg, scope, principal) else {
                continue;
            };
            // The deciding rule's `check_allow` admitted this very path with this very scope,
            // so only the root's length is left to find (no second deny-glob match).
            let root_len = match r {
                Some(_) => scope.root_len(&path, principal),
                None => scope.admit(&path, principal).ok(),
            };
            if let Some(root_len) = root_len {
                paths.push((arg.name.to_owned(), path.jail(root_len)));
                resolved.push(path);
            }
        }
        let command = match (r.and_then(|r| r.commands.as_ref()), prep.argv.as_deref()) {
            (Some(scope), Some(argv)) => scope.check(argv, prep.cwd, prep.shell).ok(),
            _ => None,
        };
        let url = match (r.and_then(|r| r.urls.as_ref()), prep.url) {
            (Some(scope), Some(u)) => scope.check(u, prep.method()).ok(),
            _ => None,
        };
        // The deciding rule's `check_allow` admitted the same ask with the same scope.
        let agent = match (r.and_then(|r| r.agents.as_ref()), prep.agent) {
            (Some(scope), Some(args)) => scope.check(args.ask(), principal).ok(),
            _ => None,
        };
        let allowed = Allowed {
            rule: match rule {
                Some((i, r)) => RuleRef {
                    index: i,
                    name: r.name.clone(),
                },
                None => RuleRef {
                    index: usize::MAX,
                    name: Arc::from("implicit:core.health"),
                },
            },
            paths,
            command,
            url,
            agent,
            limits: self.limits_for(r),
            symlinks: r
                .and_then(|r| r.paths.as_ref())
                .map_or(SymlinkMode::Within, |p| p.spec().symlinks),
            roots: match (prep.takes_command, r.and_then(|r| r.paths.as_ref())) {
                (true, Some(p)) => p.roots_for(principal),
                _ => Vec::new(),
            },
            readonly: r
                .and_then(|r| r.paths.as_ref())
                .is_some_and(|p| p.spec().readonly),
            resolved: ResolvedCheck::new(self.protected.clone(), principal.clone()),
        };
        (allowed, resolved)
    }

    /// Whether deny rule `rule` hits the call. `resolved` holds the winner's absolute paths (its
    /// path arguments) and `command_paths` a command's effective cwd and the relative arguments
    /// resolved from it, so relative arguments are judged where they really land.
    fn deny_hits(
        rule: &Rule,
        prep: &Prepared<'_>,
        resolved: &[Cow<'_, NormPath<'_>>],
        command_paths: &[NormPath<'_>],
        principal: &Principal,
    ) -> bool {
        if !rule.is_scoped() {
            return true;
        }
        if let Some(scope) = &rule.paths {
            // A path we cannot read is denied: a failing check denies.
            let unreadable = prep.paths.iter().any(|arg| {
                arg.abs.is_none()
                    && arg
                        .raw
                        .is_some_and(|raw| raw.contains('\0') || raw.is_empty())
            });
            if unreadable
                || resolved
                    .iter()
                    .map(|c| c.as_ref())
                    .chain(command_paths)
                    .chain(prep.paths.iter().filter_map(|arg| arg.abs.as_ref()))
                    .any(|p| scope.covers(p, principal))
                || prep
                    .cwd
                    .into_iter()
                    .chain(prep.argv.iter().flat_map(|a| a.iter().map(String::as_str)))
                    .filter_map(NormPath::new)
                    .any(|p| scope.covers(&p, principal))
            {
                return true;
            }
        }
        if let Some(scope) = &rule.commands
            && prep.takes_command
        {
            match prep.argv.as_deref() {
                None => return true,
                Some(argv) if scope.covers(argv) => return true,
                Some(_) => {}
            }
        }
        if let Some(scope) = &rule.urls
            && prep.takes_url
        {
            match prep.url {
                None => return true,
                Some(u) if scope.covers(u, prep.method()) => return true,
                Some(_) => {}
            }
        }
        false
    }

    fn evaluate<T: Tracer>(&self, req: &Request<'_>, t: &mut T) -> Decision {
        let Some(ix) = self.index.get(req.op) else {
            if T::ON {
                t.note(format!("`{}` is not an op of this deployment", req.op));
            }
            return Decision::NotMounted;
        };
        let principal = req.principal;
        let prep = Self::prepare(&ix.spec, req);
        // 1. Mounting: some allow rule reaching this caller must select the op.
        let Some(reaching) = self.mount(ix, principal, t) else {
            return Decision::NotMounted;
        };
        // 2. Allow rules, in order: the first whose clauses all pass decides.
        let allow = self.allow(ix, &reaching, &prep, principal, t);
        // 3. Deny rules: any hit beats the allow, whichever rule allowed.
        let denial = self.deny(ix, &reaching, &allow, &prep, principal, t);
        let rules = &self.policy.rules;
        match (denial, allow.granted) {
            // A deny rule hit: it decides, whatever allowed.
            (Some(Denial::Rule(i)), _) => {
                if T::ON
                    && let Some(w) = allow.winner
                {
                    t.outcome(w, TraceOutcome::AlsoMatched);
                }
                let r = &rules[i];
                Decision::Denied {
                    rule: RuleRef {
                        index: i,
                        name: r.name.clone(),
                    },
                    code: codes::POLICY_DENIED,
                    reason: r
                        .reason
                        .clone()
                        .unwrap_or_else(|| format!("rule `{}` denies this call", r.name)),
                }
            }
            // A deny pattern of a reaching allow rule's path scope matched: it decides too.
            (Some(Denial::Pattern(i)), _) => Decision::Denied {
                rule: RuleRef {
                    index: i,
                    name: rules[i].name.clone(),
                },
                code: codes::POLICY_PATH_DENIED,
                reason: format!(
                    "the path matches a deny pattern of rule `{}` [{}]",
                    rules[i].name,
                    rules[i]
                        .paths
                        .as_ref()
                        .map(|s| s.spec().deny.join(", "))
                        .unwrap_or_default()
                ),
            },
            // No allow rule admitted the call: the candidates, closest first.
            (None, None) => {
                let mut failures = allow.failures;
                failures.sort_by_key(|(_, f)| std::cmp::Reverse(f.depth()));
                Decision::NotPermitted {
                    candidates: failures
                        .into_iter()
                        .map(|(i, f)| Candidate {
                            rule: RuleRef {
                                index: i,
                                name: rules[i].name.clone(),
                            },
                            code: f.code(),
                            clause: f.render(&rules[i], &prep, ix),
                        })
                        .collect(),
                }
            }
            // 4. Allowed: the checks the op repeats, then the hooks, which may deny or narrow.
            (None, Some((granted, _))) => {
                if T::ON
                    && let Some(w) = allow.winner
                {
                    t.outcome(w, TraceOutcome::Decided);
                }
                let granted = self.recheck(ix, &reaching, allow.winner, granted, &prep, principal);
                if let Some(refused) = self.session_gate(req, t) {
                    return refused;
                }
                self.hooks(ix, req, allow.winner, granted, &prep, t)
            }
        }
    }

    /// The second gate of an adapter's session create (`agents.<a>.sessions.create`): the
    /// generic `agents.sessions.create` must be allowed for the same caller too. `None` when
    /// the op is not a session create, or the gate allows it; else the refusal. Decided here,
    /// in the engine, so every entry point (HTTP, MCP, `explain`, the lab) applies it and
    /// `corral explain` shows both rules in one trace.
    fn session_gate<T: Tracer>(&self, req: &Request<'_>, t: &mut T) -> Option<Decision> {
        let adapter = crate::builtin::session_create_adapter(req.op)?;
        let args = crate::request::Args::new().str("adapter", adapter);
        let gate_req = Request {
            op: crate::builtin::GENERIC_SESSION_GATE,
            principal: req.principal,
            args: &args,
        };
        let decision = if T::ON {
            let mut gate_trace = FullTrace::default();
            let d = self.evaluate(&gate_req, &mut gate_trace);
            t.merge_gate(gate_trace, &d);
            d
        } else {
            self.evaluate(&gate_req, &mut NoTrace)
        };
        let (rule, why) = match decision {
            Decision::Allowed(_) => return None,
            Decision::Denied { rule, reason, .. } => (rule, reason),
            Decision::NotPermitted { candidates } => (
                candidates.first().map_or_else(gate_ref, |c| c.rule.clone()),
                candidates
                    .first()
                    .map_or_else(String::new, |c| c.clause.clone()),
            ),
            Decision::NotMounted => (
                gate_ref(),
                format!("no allow rule mounts it for `{}`", req.principal.id),
            ),
        };
        Some(Decision::Denied {
            rule,
            code: codes::AGENTS_SESSION_GATE,
            reason: format!(
                "`{}` is allowed, but a session also needs the generic gate `{}`, which is not \
                 allowed for this caller ({why}); add `{}` to an allow rule reaching the caller",
                req.op,
                crate::builtin::GENERIC_SESSION_GATE,
                crate::builtin::GENERIC_SESSION_GATE
            ),
        })
    }

    /// Step 1, mounting: the allow rules that mount the op and reach the caller, or `None` when
    /// there are none (`core.health` is mounted for everyone).
    fn mount<'s, T: Tracer>(
        &'s self,
        ix: &'s OpIndex,
        principal: &Principal,
        t: &mut T,
    ) -> Option<Cow<'s, [usize]>> {
        let rules = &self.policy.rules;
        let reaching: Cow<'_, [usize]> = if T::ON {
            let mut reaching = Vec::with_capacity(ix.allow.len());
            for &i in &ix.allow {
                if rules[i].reaches_principal(principal) {
                    reaching.push(i);
                } else {
                    t.outcome(
                        i,
                        TraceOutcome::PrincipalNotMatched(principal_text(&rules[i], principal)),
                    );
                }
            }
            Cow::Owned(reaching)
        } else {
            // The same list, from the index instead of a scan of every rule's principals.
            ix.allow_by.reaching(rules, principal)
        };
        if reaching.is_empty() && ix.spec.id.as_str() != HEALTH_OP {
            if T::ON {
                t.note(format!(
                    "no allow rule mounts `{}` for `{}`",
                    ix.spec.id, principal.id
                ));
                for &i in &ix.deny {
                    t.outcome(i, TraceOutcome::NotReached);
                }
            }
            return None;
        }
        Some(reaching)
    }

    /// Step 2, the allow rules in order: the first whose clauses all pass wins, and its grant.
    fn allow<'p, T: Tracer>(
        &'p self,
        ix: &'p OpIndex,
        reaching: &[usize],
        prep: &'p Prepared<'_>,
        principal: &'p Principal,
        t: &mut T,
    ) -> AllowPass<'p> {
        let rules = &self.policy.rules;
        let mut winner: Option<usize> = None;
        let mut failures: Vec<(usize, Failure)> = Vec::new();
        for &i in reaching {
            if winner.is_some() {
                if T::ON {
                    let outcome = match self.check_allow(ix, &rules[i], prep, principal) {
                        Ok(()) => TraceOutcome::AlsoMatched,
                        Err(f) => TraceOutcome::ScopeNotMatched {
                            code: f.code(),
                            clause: f.render(&rules[i], prep, ix),
                        },
                    };
                    t.outcome(i, outcome);
                }
                continue;
            }
            match self.check_allow(ix, &rules[i], prep, principal) {
                Ok(()) => winner = Some(i),
                Err(f) => {
                    if T::ON {
                        t.outcome(
                            i,
                            TraceOutcome::ScopeNotMatched {
                                code: f.code(),
                                clause: f.render(&rules[i], prep, ix),
                            },
                        );
                    }
                    failures.push((i, f));
                }
            }
        }
        let granted = match winner {
            Some(i) => Some(self.grant(ix, Some((i, &rules[i])), prep, principal)),
            None if ix.spec.id.as_str() == HEALTH_OP && reaching.is_empty() => {
                Some(self.grant(ix, None, prep, principal))
            }
            None => None,
        };
        AllowPass {
            winner,
            failures,
            granted,
        }
    }

    /// Step 3, the deny rules: the first that hits the call (a deny rule reaching the caller, or
    /// a deny pattern of a reaching allow rule's path scope), whatever allowed it.
    fn deny<T: Tracer>(
        &self,
        ix: &OpIndex,
        reaching: &[usize],
        allow: &AllowPass<'_>,
        prep: &Prepared<'_>,
        principal: &Principal,
        t: &mut T,
    ) -> Option<Denial> {
        let rules = &self.policy.rules;
        // `resolved` holds the granted paths, normalized (the grant's paths, without a round
        // trip through text).
        let (allowed, resolved) = match &allow.granted {
            Some((a, r)) => (Some(a), r.as_slice()),
            None => (None, &[][..]),
        };
        // A command runs in the winner's effective cwd (the scope's, or a call's cwd resolved
        // beneath it, relative or not) and resolves its relative arguments from there, so deny
        // rules judge those places too, as they judge absolute ones.
        let command_paths: Vec<String> = allowed
            .and_then(|a| a.command.as_ref())
            .and_then(|c| c.cwd.as_ref())
            .map(|cwd| {
                let base = cwd.absolute();
                let mut v: Vec<String> = prep
                    .argv
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                    // A bare program name is looked up on PATH, not in the cwd.
                    .filter(|(k, a)| !a.starts_with('/') && (*k > 0 || a.contains('/')))
                    .map(|(_, a)| format!("{base}/{a}"))
                    .collect();
                v.push(base);
                v
            })
            .unwrap_or_default();
        // An agent works in its workdir: deny rules with a path scope judge that place too.
        let mut command_paths = command_paths;
        if let (Some(args), Some(w)) = (prep.agent, allow.winner) {
            let agent_workdir = rules[w]
                .agents
                .as_ref()
                .and_then(|scope| scope.admit_workdir(args.workdir, principal));
            if let Some(j) = agent_workdir {
                command_paths.push(j.absolute());
            }
        }
        let command_paths: Vec<NormPath<'_>> = command_paths
            .iter()
            .filter_map(|s| NormPath::new(s))
            .collect();
        // Without a trace, only the deny rules that reach the caller (from the index; same
        // order) are looked at; with one, every rule is named.
        let deny_list: Cow<'_, [usize]> = if T::ON {
            Cow::Borrowed(&ix.deny)
        } else {
            ix.deny_by.reaching(rules, principal)
        };
        let mut denied: Option<usize> = None;
        for &i in deny_list.iter() {
            let r = &rules[i];
            if !r.reaches_principal(principal) {
                if T::ON {
                    t.outcome(
                        i,
                        TraceOutcome::PrincipalNotMatched(principal_text(r, principal)),
                    );
                }
                continue;
            }
            let hit = Self::deny_hits(r, prep, resolved, &command_paths, principal);
            if T::ON {
                t.outcome(
                    i,
                    match (hit, denied) {
                        (true, None) => TraceOutcome::Decided,
                        (true, Some(_)) => TraceOutcome::AlsoMatched,
                        (false, _) => TraceOutcome::ScopeNotMatched {
                            code: codes::POLICY_DENIED,
                            clause: "the call is outside the deny rule's scopes".to_owned(),
                        },
                    },
                );
            }
            if hit && denied.is_none() {
                denied = Some(i);
                if !T::ON {
                    break;
                }
            }
        }
        if denied.is_some() || allowed.is_none() {
            return denied.map(Denial::Rule);
        }
        // Deny globs inside any reaching allow rule's path scope beat every allow, too.
        for &i in reaching {
            // The winner's `check_allow` admitted these very paths with this very scope: none
            // of them matches its deny patterns.
            if Some(i) == allow.winner {
                continue;
            }
            if let Some(scope) = &rules[i].paths
                && !scope.spec().deny.is_empty()
                && resolved
                    .iter()
                    .any(|p| scope.admit(p, principal) == Err(PathRefusal::Denied))
            {
                if T::ON {
                    t.note(format!(
                        "a deny pattern of rule `{}` matches the path; deny patterns beat every allow",
                        rules[i].name
                    ));
                }
                return Some(Denial::Pattern(i));
            }
        }
        None
    }

    /// For an allowed call with path arguments: the op re-checks where each path really leads
    /// against the deciding rule's deny patterns, every other reaching allow rule's, and the
    /// path-scoped deny rules that reach the caller.
    fn recheck(
        &self,
        ix: &OpIndex,
        reaching: &[usize],
        winner: Option<usize>,
        mut allowed: Allowed,
        prep: &Prepared<'_>,
        principal: &Principal,
    ) -> Allowed {
        if prep.paths.is_empty() {
            return allowed;
        }
        let rules = &self.policy.rules;
        for &i in reaching {
            if let Some(scope) = &rules[i].paths {
                allowed
                    .resolved
                    .allow_patterns(rules[i].name.clone(), scope, Some(i) == winner);
            }
        }
        for &i in ix.deny_by.reaching(rules, principal).iter() {
            if let Some(scope) = &rules[i].paths {
                allowed
                    .resolved
                    .deny_rule(rules[i].name.clone(), scope, rules[i].reason.clone());
            }
        }
        allowed
    }

    /// Step 4, the hooks of an allowed call: the deciding rule's, then the global ones. They may
    /// deny or narrow.
    fn hooks<T: Tracer>(
        &self,
        ix: &OpIndex,
        req: &Request<'_>,
        winner: Option<usize>,
        mut allowed: Allowed,
        prep: &Prepared<'_>,
        t: &mut T,
    ) -> Decision {
        let rule_hook = winner.and_then(|i| self.policy.rules[i].hook.as_deref());
        if rule_hook.is_none() && self.policy.hooks.is_empty() {
            return Decision::Allowed(Box::new(allowed));
        }
        let argv = prep.argv.as_deref();
        for hook in rule_hook
            .into_iter()
            .chain(self.policy.hooks.iter().map(|h| h.as_ref()))
        {
            let ctx = HookCtx {
                op: &ix.spec,
                principal: req.principal,
                args: req.args,
                paths: &allowed.paths,
                argv,
            };
            let deny = |code: &'static str, reason: String| Decision::Denied {
                rule: allowed.rule.clone(),
                code,
                reason,
            };
            match run_hook(hook, &ctx) {
                Ok(HookOutcome::NoOpinion | HookOutcome::Allow) => {}
                Ok(HookOutcome::Narrow(l)) => {
                    if T::ON {
                        t.note("a hook narrowed the limits".to_owned());
                    }
                    allowed.limits = allowed.limits.min(&l);
                }
                Ok(HookOutcome::Deny { reason, code }) => {
                    let code = codes::CATALOG
                        .iter()
                        .find(|c| c.code == code && c.code.starts_with("policy."))
                        .map_or(codes::POLICY_HOOK_DENIED, |c| c.code);
                    if T::ON {
                        t.note(format!("a hook denied the call: {reason}"));
                    }
                    return deny(code, reason);
                }
                Err(why) => {
                    if T::ON {
                        t.note(format!("a hook failed ({why}); a failing check denies"));
                    }
                    return deny(
                        codes::POLICY_HOOK_FAILED,
                        format!("the authorize hook failed: {why}"),
                    );
                }
            }
        }
        Decision::Allowed(Box::new(allowed))
    }
}

/// What the allow rules said: the first whose clauses all passed, its grant with the granted
/// paths in normalized form (`None`: no rule allowed), and why each other rule before it failed.
struct AllowPass<'p> {
    winner: Option<usize>,
    failures: Vec<(usize, Failure)>,
    granted: Option<(Allowed, Vec<Cow<'p, NormPath<'p>>>)>,
}

/// What beat the allow: a deny rule, or a deny pattern in a reaching allow rule's path scope
/// (the rule's index).
#[derive(Debug, Clone, Copy)]
enum Denial {
    Rule(usize),
    Pattern(usize),
}

fn gate_ref() -> RuleRef {
    RuleRef {
        index: usize::MAX,
        name: Arc::from(format!("gate:{}", crate::builtin::GENERIC_SESSION_GATE)),
    }
}

fn principal_text(rule: &Rule, p: &Principal) -> String {
    let sels = rule
        .principals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if p.authenticated {
        format!("principals [{sels}] do not match `{}`", p.id)
    } else {
        format!("principals [{sels}] match only authenticated callers")
    }
}
