//! What a backend applied to one run, as the backend reports it. Defined here, below the
//! sandbox crate, so the audit record can be built from it; corral-exec re-exports it as
//! `corral_exec::Attestation`.

/// What a backend actually applied to one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attestation {
    /// The backend's name (`process`, `linux`, `inproc-mock`).
    pub backend: &'static str,
    /// Whether the run was isolated from the host (namespaces, landlock, seccomp).
    pub isolated: bool,
    /// Whether the run's ephemeral state was removed and the removal checked.
    pub destroyed: bool,
    /// The primitives applied, e.g. `rlimit:as`, `pgroup`, `landlock:abi7`.
    pub primitives: Vec<String>,
}
