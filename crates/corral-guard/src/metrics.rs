//! The call-metrics port: the gateway reports each decided call to a `CallObserver` (the server
//! renders them as Prometheus text); no observer by default.

use std::time::Duration;

/// Told of every call the gateway decides, once, after it is audited.
pub trait CallObserver: Send + Sync + std::fmt::Debug {
    /// One call: `op` is a known op id or `unknown` (the gateway never passes an id a caller
    /// made up, so a caller cannot grow the label set), `outcome` the audit outcome, `took`
    /// the time from receipt to response.
    fn record(&self, op: &str, outcome: &'static str, took: Duration);
}

/// The default observer: records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl CallObserver for NoObserver {
    fn record(&self, _op: &str, _outcome: &'static str, _took: Duration) {}
}
