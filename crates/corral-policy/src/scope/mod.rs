//! Typed scopes that narrow what an allowed op may touch: paths, commands, urls, agents.

pub mod agent;
pub mod command;
pub mod egress;
pub mod path;
pub mod url;

pub use agent::{
    ADAPTERS, AgentAsk, AgentGrant, AgentPermissions, AgentRefusal, AgentScope, AgentScopeSpec,
    STEP_KINDS, is_adapter, parse_adapter, step_op_id,
};
pub use command::{
    ArgPattern, ArgvPattern, CommandGrant, CommandRefusal, CommandScope, CommandScopeSpec,
};
pub use egress::{
    EgressAllowList, EgressEntry, EgressEntryError, EgressRefusal, MAX_EGRESS_ENTRIES, NetworkSpec,
};
pub use path::{JailedPath, NormPath, PathRefusal, PathScope, PathScopeSpec, SymlinkMode};
pub use url::{UrlGrant, UrlRefusal, UrlScope, UrlScopeSpec, is_private_ip};
