//! `/metrics`: the gateway's `CallObserver`, kept in a `prometheus-client` registry (calls by op
//! and outcome, a latency histogram) and rendered as OpenMetrics text; with the metering per
//! purpose (`corral_runs_total{purpose}`, `corral_purpose_calls_total{purpose}`, summed over
//! tenants) read from the runtime's [`Meter`] at each scrape.

use std::fmt;
use std::time::Duration;

use std::sync::Arc;

use corral_guard::CallObserver;
use corral_guard::metering::Meter;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of `/metrics`: OpenMetrics 1.0 text (it declares a counter family by its
/// name without `_total` and ends with `# EOF`; Prometheus scrapes it natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets, in seconds (`+Inf` is added by the histogram).
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The labels of `corral_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    /// A known op id, or `unknown` (the gateway's rule: a caller cannot grow the label set).
    op: String,
    /// The audit outcome.
    outcome: &'static str,
}

/// The labels of `corral_learning_hints_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabels {
    /// The level the hint raised to.
    level: u8,
}

/// Learning mode's series (registered only when it is on).
struct LearningMetrics {
    hints: Family<LevelLabels, Counter>,
    manifest_errors: Counter,
    watcher: std::sync::Weak<corral_learn::watch::Watcher>,
    sync: std::sync::Mutex<()>,
}

/// The labels of `corral_llm_tokens_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    /// `prompt` or `completion`.
    kind: &'static str,
}

/// The labels of `corral_llm_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LlmLabels {
    /// `ok`, `upstream_error`, `unreachable` or `timeout` (a request the guard refused counts
    /// in `corral_calls_total{op="llm.chat"}` only).
    outcome: &'static str,
}

/// The label of the metering series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PurposeLabels {
    /// `live`, `simulation`, `replay` or `judge`.
    purpose: &'static str,
}

/// The metering per purpose, read from the meter at each scrape.
#[derive(Debug)]
struct Metering(Arc<Meter>);

impl Collector for Metering {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let totals = self.0.totals();
        for (name, help, pick) in [
            (
                "corral_runs",
                "Runs started, by purpose",
                (|t: &(_, u64, u64)| t.1) as fn(&(_, u64, u64)) -> u64,
            ),
            (
                "corral_purpose_calls",
                "Calls made (judge: judge calls), by purpose",
                |t: &(_, u64, u64)| t.2,
            ),
        ] {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for t in &totals {
                let labels = PurposeLabels {
                    purpose: t.0.as_str(),
                };
                ConstCounter::new(pick(t)).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// Call counters and a latency histogram, in a registry of their own, and the metering.
pub struct CallMetrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    duration: Histogram,
    learning: Option<LearningMetrics>,
    llm_tokens: Family<TokenLabels, Counter>,
    llm_requests: Family<LlmLabels, Counter>,
    meter: Arc<Meter>,
}

impl fmt::Debug for CallMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallMetrics").finish_non_exhaustive()
    }
}

impl Default for CallMetrics {
    fn default() -> Self {
        let calls = Family::<CallLabels, Counter>::default();
        let duration = Histogram::new(BUCKETS);
        let mut registry = Registry::default();
        // The encoder appends `_total` to a counter's series and `.` to the help text.
        registry.register(
            "corral_calls",
            "Calls decided, by op and outcome",
            calls.clone(),
        );
        registry.register(
            "corral_call_duration_seconds",
            "Time from receipt to response",
            duration.clone(),
        );
        let llm_tokens = Family::<TokenLabels, Counter>::default();
        let llm_requests = Family::<LlmLabels, Counter>::default();
        registry.register(
            "corral_llm_tokens",
            "Model tokens the LLM proxy forwarded, by kind",
            llm_tokens.clone(),
        );
        registry.register(
            "corral_llm_requests",
            "Model requests the LLM proxy forwarded, by outcome",
            llm_requests.clone(),
        );
        // At zero from the start, so `rate()` over them (the Grafana dashboard's) has series
        // before the first model request.
        for kind in ["prompt", "completion"] {
            let _ = llm_tokens.get_or_create(&TokenLabels { kind });
        }
        for outcome in ["ok", "upstream_error"] {
            let _ = llm_requests.get_or_create(&LlmLabels { outcome });
        }
        let meter = Arc::new(Meter::default());
        registry.register_collector(Box::new(Metering(Arc::clone(&meter))));
        Self {
            registry,
            calls,
            duration,
            learning: None,
            llm_tokens,
            llm_requests,
            meter,
        }
    }
}

impl CallMetrics {
    /// Counts one forwarded model request and its tokens.
    pub fn record_llm(&self, outcome: &'static str, prompt: u64, completion: u64) {
        self.llm_requests
            .get_or_create(&LlmLabels { outcome })
            .inc();
        if prompt > 0 {
            self.llm_tokens
                .get_or_create(&TokenLabels { kind: "prompt" })
                .inc_by(prompt);
        }
        if completion > 0 {
            self.llm_tokens
                .get_or_create(&TokenLabels { kind: "completion" })
                .inc_by(completion);
        }
    }

    /// The meter `/metrics` shows: give it to the runtime (`RuntimeOptions::with_meter`).
    pub fn meter(&self) -> Arc<Meter> {
        Arc::clone(&self.meter)
    }

    /// The registry with learning mode's series too: `corral_learning_hints_total{level}` and
    /// `corral_learning_manifest_errors_total` (the failed reloads of `watcher`'s manifest).
    pub fn with_learning(watcher: &std::sync::Arc<corral_learn::watch::Watcher>) -> Self {
        let mut m = Self::default();
        let hints = Family::<LevelLabels, Counter>::default();
        let manifest_errors = Counter::default();
        m.registry.register(
            "corral_learning_hints",
            "Hints taken in learning mode, by the level they raised to",
            hints.clone(),
        );
        m.registry.register(
            "corral_learning_manifest_errors",
            "Scenario manifest reloads refused (the last good manifest stayed)",
            manifest_errors.clone(),
        );
        m.learning = Some(LearningMetrics {
            hints,
            manifest_errors,
            watcher: std::sync::Arc::downgrade(watcher),
            sync: std::sync::Mutex::new(()),
        });
        m
    }

    /// Counts a hint that raised a level to `level`.
    pub fn hint_taken(&self, level: u8) {
        if let Some(l) = &self.learning {
            l.hints.get_or_create(&LevelLabels { level }).inc();
        }
    }

    /// The OpenMetrics text exposition (ends with `# EOF`).
    pub fn render(&self) -> Result<String, fmt::Error> {
        if let Some(l) = &self.learning
            && let Some(w) = l.watcher.upgrade()
        {
            let _held = l.sync.lock().unwrap_or_else(|e| e.into_inner());
            let seen = l.manifest_errors.get();
            l.manifest_errors
                .inc_by(w.errors_total().saturating_sub(seen));
        }
        let mut out = String::new();
        encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

impl CallObserver for CallMetrics {
    fn record(&self, op: &str, outcome: &'static str, took: Duration) {
        self.calls
            .get_or_create(&CallLabels {
                op: op.to_owned(),
                outcome,
            })
            .inc();
        self.duration.observe(took.as_secs_f64());
    }
}
