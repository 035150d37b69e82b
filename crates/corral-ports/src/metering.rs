//! Metering per purpose (issue 15 item 4): runs, calls and, where known, model tokens and spend,
//! per (tenant, purpose), counted in this process since it started. The gateway counts calls
//! (every decided call, whatever its outcome) and the `live` runs it opens; the lab counts the
//! runs it starts (`simulation`, `replay`) and each tournament as one `judge` run with its judge
//! calls. Tokens and spend stay `null` (unknown, never 0) until something reports them through
//! [`Meter::charge_tokens`] (the LLM proxy, later).
//!
//! The figures are this process's: `/metrics` sums them over tenants per purpose
//! (`corral_runs_total{purpose}`, `corral_purpose_calls_total{purpose}`), and an admin reads one
//! tenant's (`GET /v1/sandbox/metering`). At most [`MAX_TENANTS`] tenants are told apart; the
//! rest are counted under [`OTHER_TENANTS`], so a caller cannot grow the table without bound.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::runs::RunPurpose;

/// Tenants told apart at most.
pub const MAX_TENANTS: usize = 10_000;
/// The tenant the counts of tenants past [`MAX_TENANTS`] go to.
pub const OTHER_TENANTS: &str = "(other tenants)";

/// Runs, calls, model tokens and spend of one purpose. Tokens and spend are `null` while
/// corral does not know them (no model proxy meters them yet): unknown, never free.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Metered {
    /// Runs.
    pub runs: u64,
    /// Calls (gateway calls; for `judge`, judge calls).
    pub calls: u64,
    /// Model tokens; `null`: not known.
    pub tokens: Option<u64>,
    /// Spend; `null`: not known.
    pub spend: Option<f64>,
}

/// One tenant's metering, one entry per purpose (all four, in [`RunPurpose::ALL`]'s order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TenantMetering {
    /// The tenant.
    pub tenant: String,
    /// `live`, `simulation`, `replay` and `judge`.
    pub purposes: Vec<PurposeMetering>,
}

/// One purpose's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PurposeMetering {
    /// The purpose.
    pub purpose: RunPurpose,
    /// Its figures.
    #[serde(flatten)]
    pub metered: Metered,
}

/// The counts of this process, per tenant and purpose. Share one (`Arc`) between the gateway,
/// the lab's gateways and `/metrics`.
#[derive(Debug, Default)]
pub struct Meter {
    book: Mutex<HashMap<String, [Metered; 4]>>,
}

fn slot(purpose: RunPurpose) -> usize {
    match purpose {
        RunPurpose::Live => 0,
        RunPurpose::Simulation => 1,
        RunPurpose::Replay => 2,
        RunPurpose::Judge => 3,
    }
}

impl Meter {
    fn with(&self, tenant: &str, purpose: RunPurpose, f: impl FnOnce(&mut Metered)) {
        let Ok(mut book) = self.book.lock() else {
            return;
        };
        let m = match book.get_mut(tenant) {
            Some(m) => m,
            None => {
                let key = if book.len() < MAX_TENANTS {
                    tenant
                } else {
                    OTHER_TENANTS
                };
                book.entry(key.to_owned()).or_default()
            }
        };
        f(&mut m[slot(purpose)]);
    }

    /// Counts one run of `purpose` started by `tenant`.
    pub fn run(&self, tenant: &str, purpose: RunPurpose) {
        self.with(tenant, purpose, |m| m.runs = m.runs.saturating_add(1));
    }

    /// Counts `n` calls of `purpose` made by `tenant`.
    pub fn calls(&self, tenant: &str, purpose: RunPurpose, n: u64) {
        self.with(tenant, purpose, |m| m.calls = m.calls.saturating_add(n));
    }

    /// Adds model tokens (and, when known, their spend) to `tenant`'s `purpose`: the first
    /// report turns the figure from `null` (unknown) into a number. For the LLM proxy.
    pub fn charge_tokens(
        &self,
        tenant: &str,
        purpose: RunPurpose,
        tokens: u64,
        spend: Option<f64>,
    ) {
        self.with(tenant, purpose, |m| {
            m.tokens = Some(m.tokens.unwrap_or(0).saturating_add(tokens));
            if let Some(s) = spend.filter(|s| s.is_finite() && *s >= 0.0) {
                m.spend = Some(m.spend.unwrap_or(0.0) + s);
            }
        });
    }

    /// `tenant`'s figures, every purpose listed (zeros where nothing was counted).
    pub fn tenant(&self, tenant: &str) -> TenantMetering {
        let row = self
            .book
            .lock()
            .ok()
            .and_then(|b| b.get(tenant).cloned())
            .unwrap_or_default();
        TenantMetering {
            tenant: tenant.to_owned(),
            purposes: RunPurpose::ALL
                .into_iter()
                .map(|p| PurposeMetering {
                    purpose: p,
                    metered: row[slot(p)].clone(),
                })
                .collect(),
        }
    }

    /// Runs and calls per purpose, summed over every tenant (what `/metrics` shows).
    pub fn totals(&self) -> [(RunPurpose, u64, u64); 4] {
        let mut out = RunPurpose::ALL.map(|p| (p, 0_u64, 0_u64));
        if let Ok(book) = self.book.lock() {
            for row in book.values() {
                for (i, m) in row.iter().enumerate() {
                    out[i].1 = out[i].1.saturating_add(m.runs);
                    out[i].2 = out[i].2.saturating_add(m.calls);
                }
            }
        }
        out
    }
}
