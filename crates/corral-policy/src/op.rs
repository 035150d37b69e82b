//! Operations: validated op ids, effects, the tier and safety derived from them, and op specs.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::PolicyError;

/// Namespaces that belong to corral's built-in ops; custom ops may not use them.
pub const RESERVED_NAMESPACES: &[&str] = &[
    "core", "files", "commands", "process", "terminal", "system", "http", "agents", "ext",
    "sandbox", "learning", "mcp",
];

/// A validated op id: dotted, 1-128 chars of `A-Za-z0-9_.-`, no empty segment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(
    // INVARIANT (valid-op-id): only built by `OpId::parse`.
    String,
);

impl OpId {
    /// Parses and validates an op id.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let bad = |why: &str| PolicyError::InvalidOpId {
            id: s.to_owned(),
            why: why.to_owned(),
        };
        if s.is_empty() || s.len() > 128 {
            return Err(bad("an op id has 1 to 128 characters"));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        {
            return Err(bad(&format!(
                "`{c}` is not allowed; use letters, digits, `_`, `-` and `.`"
            )));
        }
        if s.split('.').any(str::is_empty) {
            return Err(bad("segments between dots may not be empty"));
        }
        Ok(Self(s.to_owned()))
    }

    /// The id as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first dotted segment (`files` for `files.read`).
    pub fn namespace(&self) -> &str {
        self.0.split('.').next().unwrap_or("")
    }

    /// Whether the id lives in a namespace reserved for corral's built-in ops.
    pub fn is_reserved(&self) -> bool {
        RESERVED_NAMESPACES.contains(&self.namespace())
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an op does to the world. Every op declares a non-empty set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// Reads state.
    Read,
    /// Creates or changes state.
    Write,
    /// Removes state.
    Delete,
    /// Runs a program.
    Exec,
    /// Reaches the network.
    Net,
    /// Changes the server itself.
    Admin,
}

impl Effect {
    /// Every effect, in a stable order.
    pub const ALL: [Effect; 6] = [
        Effect::Read,
        Effect::Write,
        Effect::Delete,
        Effect::Exec,
        Effect::Net,
        Effect::Admin,
    ];

    /// The name used in config and selectors.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
            Effect::Delete => "delete",
            Effect::Exec => "exec",
            Effect::Net => "net",
            Effect::Admin => "admin",
        }
    }

    /// Parses an effect name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }

    fn bit(self) -> u8 {
        match self {
            Effect::Read => 1,
            Effect::Write => 2,
            Effect::Delete => 4,
            Effect::Exec => 8,
            Effect::Net => 16,
            Effect::Admin => 32,
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EffectSet(u8);

impl EffectSet {
    /// The empty set.
    pub const EMPTY: EffectSet = EffectSet(0);

    /// Builds a set from effects.
    pub fn of(effects: &[Effect]) -> Self {
        Self(effects.iter().fold(0, |acc, e| acc | e.bit()))
    }

    /// Whether the set holds `e`.
    pub fn contains(self, e: Effect) -> bool {
        self.0 & e.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the only effect is `read`.
    pub fn is_read_only(self) -> bool {
        self == EffectSet::of(&[Effect::Read])
    }

    /// Whether the op changes or removes state (`write` or `delete`).
    pub fn mutates_files(self) -> bool {
        self.contains(Effect::Write) || self.contains(Effect::Delete)
    }

    /// The effects in the set, in a stable order.
    pub fn iter(self) -> impl Iterator<Item = Effect> {
        Effect::ALL.into_iter().filter(move |e| self.contains(*e))
    }
}

impl fmt::Display for EffectSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Effect::as_str).collect();
        f.write_str(&names.join(","))
    }
}

/// Risk tier: who may call an op and whether a human must confirm it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Reads only: viewer and above, no confirmation.
    Read,
    /// Changes something: operator and above, confirmation required.
    Confirm,
    /// Irreversible or administrative: admin only, confirmation required.
    Destructive,
}

impl Tier {
    /// Every tier, lowest first.
    pub const ALL: [Tier; 3] = [Tier::Read, Tier::Confirm, Tier::Destructive];

    /// The tier implied by a set of effects: `read` only -> read; any of `write exec net` ->
    /// confirm; any of `delete admin` -> destructive. An empty set is treated as `admin`.
    pub fn from_effects(effects: EffectSet) -> Tier {
        if effects.is_empty() || effects.contains(Effect::Delete) || effects.contains(Effect::Admin)
        {
            Tier::Destructive
        } else if effects.contains(Effect::Write)
            || effects.contains(Effect::Exec)
            || effects.contains(Effect::Net)
        {
            Tier::Confirm
        } else {
            Tier::Read
        }
    }

    /// The name used in config and selectors.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Read => "read",
            Tier::Confirm => "confirm",
            Tier::Destructive => "destructive",
        }
    }

    /// Parses a tier name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether an op may run during a sandboxed replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Safety {
    /// Reads only, or its writes land only in the run's ephemeral workspace.
    Safe,
    /// Anything else.
    Unsafe,
}

impl Safety {
    /// The name shown in `describe`.
    pub fn as_str(self) -> &'static str {
        match self {
            Safety::Safe => "safe",
            Safety::Unsafe => "unsafe",
        }
    }
}

/// The type of one op parameter. The kind decides which scope guards it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamKind {
    /// A filesystem path, guarded by a `PathScope` (or by the param's own `root`).
    Path {
        /// A root declared by the op itself (custom ops): the path must also lie under it.
        root: Option<String>,
    },
    /// A working directory for a command, guarded by the `CommandScope`'s cwd.
    Cwd,
    /// An argument vector, guarded by a `CommandScope`.
    Argv,
    /// A command line split into an argv (never given to a shell unless the scope allows it).
    CommandLine,
    /// A URL, guarded by a `UrlScope`.
    Url,
    /// A signed integer.
    Int,
    /// One word: `[A-Za-z0-9_][A-Za-z0-9_.-]*` (never starts with `-`).
    Word,
    /// Free text.
    String,
    /// One of a fixed set of values.
    Enum(Vec<String>),
    /// `true` or `false`.
    Bool,
    /// Any JSON value, passed on as is and never interpreted by the policy (the arguments of
    /// an upstream MCP server's tool, whose sandbox is what confines them).
    Json,
}

impl ParamKind {
    /// The name shown in `describe`.
    pub fn name(&self) -> &'static str {
        match self {
            ParamKind::Path { .. } => "path",
            ParamKind::Cwd => "cwd",
            ParamKind::Argv => "argv",
            ParamKind::CommandLine => "command",
            ParamKind::Url => "url",
            ParamKind::Int => "int",
            ParamKind::Word => "word",
            ParamKind::String => "string",
            ParamKind::Enum(_) => "enum",
            ParamKind::Bool => "bool",
            ParamKind::Json => "json",
        }
    }

    /// The scope an allow rule must carry for an op with this parameter, if any.
    pub fn required_scope(&self) -> Option<ScopeKind> {
        match self {
            ParamKind::Path { root: None } => Some(ScopeKind::Paths),
            ParamKind::Argv | ParamKind::CommandLine | ParamKind::Cwd => Some(ScopeKind::Commands),
            ParamKind::Url => Some(ScopeKind::Urls),
            ParamKind::Path { root: Some(_) }
            | ParamKind::Int
            | ParamKind::Word
            | ParamKind::String
            | ParamKind::Enum(_)
            | ParamKind::Bool
            | ParamKind::Json => None,
        }
    }
}

/// The three kinds of scope an allow rule can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScopeKind {
    /// `paths:`
    Paths,
    /// `commands:`
    Commands,
    /// `urls:`
    Urls,
    /// `agents:` (the ops of a hosted coding agent; see `scope::agent`)
    Agents,
}

impl ScopeKind {
    /// The config key of this scope.
    pub fn key(self) -> &'static str {
        match self {
            ScopeKind::Paths => "paths",
            ScopeKind::Commands => "commands",
            ScopeKind::Urls => "urls",
            ScopeKind::Agents => "agents",
        }
    }
}

/// One declared parameter of an op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    /// The argument name.
    pub name: String,
    /// Its type.
    pub kind: ParamKind,
    /// Whether a call must give it.
    pub required: bool,
}

impl ParamSpec {
    /// A parameter.
    pub fn new(name: &str, kind: ParamKind, required: bool) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            required,
        }
    }
}

/// Everything the policy needs to know about one op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSpec {
    /// The op id.
    pub id: OpId,
    /// Declared effects. Empty means undeclared, which is treated as `admin`.
    pub effects: EffectSet,
    /// A tier raised by config; never lower than the derived tier.
    // INVARIANT (tier-never-lowered): `OpSpec::raise_tier` refuses a lower tier.
    tier_raised: Option<Tier>,
    /// The op's writes land only in the run's ephemeral workspace.
    pub contained: bool,
    /// Mounted only when an allow rule names the exact id.
    pub explicit_only: bool,
    /// Declared parameters.
    pub params: Vec<ParamSpec>,
    /// Groups the op belongs to, for `group:NAME` selectors.
    pub groups: Vec<String>,
    /// One line for `describe`.
    pub summary: String,
    /// Calling it twice with the same arguments does what calling it once does (declared by
    /// config; MCP clients see it as `idempotentHint`).
    pub idempotent: bool,
    /// The op runs a program whatever its declared effects (a `custom:` op): open mode refuses
    /// it like an `exec` op.
    pub runs_program: bool,
    /// The op hosts a coding agent (`agents.<a>.run`, `.sessions.create`, `.sessions.send_event`):
    /// an allow rule needs an `agents:` scope, and only such a rule (or one naming the op or
    /// the `agents` namespace) mounts it. Its `model` and `workdir` params are judged by that
    /// scope.
    pub agent_scoped: bool,
    /// A person confirms every call, whatever the deciding rule's `confirm:` says (applying
    /// an agent's held changes: the scope asked for a person).
    pub always_confirmed: bool,
}

impl OpSpec {
    /// A new op spec. Ops with the `admin` effect, or with no declared effect, are explicit-only.
    pub fn new(id: OpId, effects: &[Effect], summary: &str) -> Self {
        let effects = EffectSet::of(effects);
        Self {
            id,
            effects,
            tier_raised: None,
            contained: false,
            explicit_only: effects.is_empty() || effects.contains(Effect::Admin),
            params: Vec::new(),
            groups: Vec::new(),
            summary: summary.to_owned(),
            idempotent: false,
            runs_program: false,
            agent_scoped: false,
            always_confirmed: false,
        }
    }

    /// Adds a parameter.
    pub fn param(mut self, name: &str, kind: ParamKind, required: bool) -> Self {
        self.params.push(ParamSpec::new(name, kind, required));
        self
    }

    /// Adds a group.
    pub fn group(mut self, group: &str) -> Self {
        self.groups.push(group.to_owned());
        self
    }

    /// Raises the tier. A tier below the one derived from the effects is refused.
    pub fn raise_tier(&mut self, tier: Tier) -> Result<(), PolicyError> {
        let derived = Tier::from_effects(self.effects);
        if tier < derived {
            return Err(PolicyError::TierLowered {
                op: self.id.to_string(),
                derived,
                asked: tier,
            });
        }
        self.tier_raised = Some(tier);
        Ok(())
    }

    /// The effective tier: derived from effects, raised by config.
    pub fn tier(&self) -> Tier {
        let derived = Tier::from_effects(self.effects);
        self.tier_raised.map_or(derived, |t| t.max(derived))
    }

    /// Safety for replay: a read-only op, or one declared `contained` (its writes stay in the
    /// run's ephemeral workspace) whose effects are reads and writes only. `contained` is a
    /// claim about where writes land; it never vouches for removing state, running programs,
    /// reaching the network or administering the server (nor for an op that declares no
    /// effects, which counts as `admin`).
    pub fn safety(&self) -> Safety {
        let e = self.effective_effects();
        let writes_only = e.iter().all(|x| matches!(x, Effect::Read | Effect::Write));
        if e.is_read_only() || (self.contained && writes_only) {
            Safety::Safe
        } else {
            Safety::Unsafe
        }
    }

    /// Whether calling it runs a program: the `exec` effect (or `admin`, which may do anything),
    /// or a custom op whatever it declares. Open mode refuses such ops.
    pub fn can_run_programs(&self) -> bool {
        let e = self.effective_effects();
        self.runs_program || e.contains(Effect::Exec) || e.contains(Effect::Admin)
    }

    /// The effects as used for decisions: undeclared means `admin`.
    pub fn effective_effects(&self) -> EffectSet {
        if self.effects.is_empty() {
            EffectSet::of(&[Effect::Admin])
        } else {
            self.effects
        }
    }

    /// The scopes an allow rule for this op must carry.
    pub fn required_scopes(&self) -> Vec<ScopeKind> {
        let mut kinds: Vec<ScopeKind> = self
            .params
            .iter()
            .filter_map(|p| p.kind.required_scope())
            .collect();
        if self.agent_scoped {
            kinds.push(ScopeKind::Agents);
        }
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

/// The set of ops a deployment knows: built-ins plus custom ops. Frozen once built.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    ops: BTreeMap<String, OpSpec>,
}

impl Catalog {
    /// An empty catalog.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in ops.
    pub fn builtin() -> Self {
        let mut c = Self::empty();
        for spec in crate::builtin::builtin_ops() {
            c.ops.insert(spec.id.to_string(), spec);
        }
        c
    }

    /// Adds a tool of an upstream MCP server: its id must be `mcp.<server>.<tool>` (the `mcp`
    /// namespace is reserved for them).
    pub fn add_upstream(&mut self, spec: OpSpec) -> Result<(), PolicyError> {
        if spec.id.namespace() != "mcp" || spec.id.as_str().split('.').count() < 3 {
            return Err(PolicyError::InvalidOpId {
                id: spec.id.to_string(),
                why: "an upstream tool's id is `mcp.<server>.<tool>`".to_owned(),
            });
        }
        if self.ops.contains_key(spec.id.as_str()) {
            return Err(PolicyError::DuplicateOp {
                op: spec.id.to_string(),
            });
        }
        self.ops.insert(spec.id.to_string(), spec);
        Ok(())
    }

    /// Adds a custom op. Its id may not be in a reserved namespace nor already taken.
    pub fn add_custom(&mut self, spec: OpSpec) -> Result<(), PolicyError> {
        if spec.id.is_reserved() {
            return Err(PolicyError::ReservedNamespace {
                op: spec.id.to_string(),
                namespace: spec.id.namespace().to_owned(),
            });
        }
        if self.ops.contains_key(spec.id.as_str()) {
            return Err(PolicyError::DuplicateOp {
                op: spec.id.to_string(),
            });
        }
        self.ops.insert(spec.id.to_string(), spec);
        Ok(())
    }

    /// Changes the spec of an existing op in place (used to raise tiers).
    pub fn get_mut(&mut self, id: &str) -> Option<&mut OpSpec> {
        self.ops.get_mut(id)
    }

    /// Removes an op (`disabled_ops`): everything built from the catalog afterwards no longer
    /// sees it. Returns the removed spec.
    pub fn remove(&mut self, id: &str) -> Option<OpSpec> {
        self.ops.remove(id)
    }

    /// Looks an op up by id.
    pub fn get(&self, id: &str) -> Option<&OpSpec> {
        self.ops.get(id)
    }

    /// Every op, ordered by id.
    pub fn iter(&self) -> impl Iterator<Item = &OpSpec> {
        self.ops.values()
    }

    /// Every op id, for did-you-mean.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.ops.keys().map(String::as_str)
    }

    /// Every group name used by some op.
    pub fn groups(&self) -> Vec<&str> {
        let mut g: Vec<&str> = self
            .ops
            .values()
            .flat_map(|o| o.groups.iter().map(String::as_str))
            .collect();
        g.sort_unstable();
        g.dedup();
        g
    }

    /// The number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no ops.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}
