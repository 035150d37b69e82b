//! Limits on a call; the effective limit is the minimum of every limit that applies.

use std::time::Duration;

use crate::units::Rate;

/// Per-call limits. `None` means "no limit from this source".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Largest file read or written, in bytes.
    pub max_bytes: Option<u64>,
    /// Most directory entries listed.
    pub max_entries: Option<u64>,
    /// Wall-clock time a call may take.
    pub timeout: Option<Duration>,
    /// Most bytes of command output kept.
    pub max_output_bytes: Option<u64>,
    /// Calls per window, per principal.
    pub rate: Option<Rate>,
    /// Calls in flight at once, per principal.
    pub concurrency: Option<u32>,
    /// CPU seconds a command may use.
    pub cpu_seconds: Option<u64>,
    /// Memory a command may use, in bytes.
    pub memory: Option<u64>,
    /// Processes a command may run at once.
    pub processes: Option<u32>,
    /// Bytes a command may write into its write paths (its copy-on-write layer), counted at
    /// each file's full size.
    pub write_quota: Option<u64>,
}

/// The memory cap of a run whose config sets none (`commands.run`, custom ops, upstream MCP
/// servers): 1 GiB. Raising it is explicit (`limits.memory`) and linted (`lint.raised_cap`).
pub const DEFAULT_MEMORY: u64 = 1 << 30;

/// The most a recording may take when the config sets no `recordings.max_bytes`: the stored
/// text of its events, 16 MiB. Raising it is explicit and linted (`lint.raised_cap`).
pub const DEFAULT_RECORDING_BYTES: u64 = 16 * 1024 * 1024;

/// The most events a recording may hold when the config sets no `recordings.max_events`:
/// 10,000. Raising it is explicit and linted (`lint.raised_cap`).
pub const DEFAULT_RECORDING_EVENTS: u64 = 10_000;

/// The most live (unexpired) recordings a tenant may keep when the config sets no
/// `recordings.max_per_tenant`: a call that would start one more is refused (`recording.limit`).
pub const DEFAULT_RECORDINGS_PER_TENANT: u64 = 10_000;

/// The most live recordings one principal (by identity) may keep in a tenant when the config
/// sets no `recordings.max_per_principal`: a tenth of the tenant's, so one operator cannot fill
/// the tenant's share (`recording.limit`).
pub const DEFAULT_RECORDINGS_PER_PRINCIPAL: u64 = 1_000;

/// What one run may add to its write paths when the config sets no `limits.write_quota`:
/// 1 GiB. Raising it is explicit and linted (`lint.raised_cap`).
pub const DEFAULT_WRITE_QUOTA: u64 = 1 << 30;

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl Limits {
    /// No limits.
    pub const NONE: Limits = Limits {
        max_bytes: None,
        max_entries: None,
        timeout: None,
        max_output_bytes: None,
        rate: None,
        concurrency: None,
        cpu_seconds: None,
        memory: None,
        processes: None,
        write_quota: None,
    };

    /// The field-wise minimum of two limits.
    pub fn min(&self, other: &Limits) -> Limits {
        Limits {
            max_bytes: min_opt(self.max_bytes, other.max_bytes),
            max_entries: min_opt(self.max_entries, other.max_entries),
            timeout: min_opt(self.timeout, other.timeout),
            max_output_bytes: min_opt(self.max_output_bytes, other.max_output_bytes),
            rate: match (self.rate, other.rate) {
                (Some(a), Some(b)) => Some(if b.is_stricter_than(&a) { b } else { a }),
                (a, None) => a,
                (None, b) => b,
            },
            concurrency: min_opt(self.concurrency, other.concurrency),
            cpu_seconds: min_opt(self.cpu_seconds, other.cpu_seconds),
            memory: min_opt(self.memory, other.memory),
            processes: min_opt(self.processes, other.processes),
            write_quota: min_opt(self.write_quota, other.write_quota),
        }
    }

    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::NONE
    }
}

impl std::fmt::Display for Limits {
    /// `max_bytes=10MB timeout=90s rate=10/min`, or `none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::units::{format_duration, format_size};
        let mut parts = Vec::new();
        if let Some(v) = self.max_bytes {
            parts.push(format!("max_bytes={}", format_size(v)));
        }
        if let Some(v) = self.max_entries {
            parts.push(format!("max_entries={v}"));
        }
        if let Some(v) = self.timeout {
            parts.push(format!("timeout={}", format_duration(v)));
        }
        if let Some(v) = self.max_output_bytes {
            parts.push(format!("max_output_bytes={}", format_size(v)));
        }
        if let Some(v) = self.rate {
            parts.push(format!("rate={v}"));
        }
        if let Some(v) = self.concurrency {
            parts.push(format!("concurrency={v}"));
        }
        if let Some(v) = self.cpu_seconds {
            parts.push(format!("cpu_seconds={v}"));
        }
        if let Some(v) = self.memory {
            parts.push(format!("memory={}", format_size(v)));
        }
        if let Some(v) = self.processes {
            parts.push(format!("processes={v}"));
        }
        if let Some(v) = self.write_quota {
            parts.push(format!("write_quota={}", format_size(v)));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_limit_is_the_minimum_of_each_field() {
        let a = Limits {
            max_bytes: Some(10),
            timeout: Some(Duration::from_secs(60)),
            ..Limits::NONE
        };
        let b = Limits {
            max_bytes: Some(5),
            memory: Some(100),
            rate: Rate::parse("10/min").ok(),
            ..Limits::NONE
        };
        let m = a.min(&b);
        assert_eq!(m.max_bytes, Some(5));
        assert_eq!(m.timeout, Some(Duration::from_secs(60)));
        assert_eq!(m.memory, Some(100));
        assert_eq!(m.rate, Rate::parse("10/min").ok());
        assert_eq!(m, b.min(&a));
    }
}
