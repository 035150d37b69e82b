//! `corral serve`: load the config (or build one from `--preset --root`), then run the server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use corral_server::{ServeOptions, serve};

use crate::context::{self, Threads};
use crate::{CliError, CliResult, Exit};

/// The flags of `corral serve`.
#[derive(Debug)]
pub struct Args {
    pub config: Option<PathBuf>,
    pub preset: Option<String>,
    pub root: Option<PathBuf>,
    pub listen: SocketAddr,
    pub allow_open: bool,
    pub max_body_bytes: usize,
}

/// JSON log lines on stderr (`CORRAL_LOG` filters them), and with `telemetry:` the exporter's
/// layer beside them: it alone sees corral's spans (`corral_telemetry::TARGET`).
fn init_logging(exporter: Option<&corral_telemetry::Exporter>) {
    let _ = tracing::subscriber::set_global_default(subscriber(exporter));
}

/// The process's subscriber. Without an exporter there is no layer at all in the exporter's
/// place (not a `None` one: an absent `Option` layer is enabled for everything, so each of
/// corral's spans would be built, its fields formatted, on every call).
fn subscriber(
    exporter: Option<&corral_telemetry::Exporter>,
) -> Box<dyn tracing::Subscriber + Send + Sync> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::{EnvFilter, Layer};
    // rmcp logs a line per MCP request at INFO: corral's own audit already has each call.
    let mut filter =
        EnvFilter::try_from_env("CORRAL_LOG").unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    if let Ok(off) = format!("{}=off", corral_telemetry::TARGET).parse() {
        filter = filter.add_directive(off);
    }
    let log = tracing_subscriber::fmt::layer()
        .json()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let logged = tracing_subscriber::registry().with(log);
    match exporter {
        Some(e) => Box::new(logged.with(e.layer())),
        None => Box::new(logged),
    }
}

/// The exporter `telemetry:` asks for, if it does.
fn telemetry(
    loaded: &corral_config::Loaded,
) -> Result<Option<corral_telemetry::Exporter>, CliError> {
    let Some(t) = &loaded.config.telemetry else {
        return Ok(None);
    };
    let settings = corral_telemetry::Settings {
        endpoint: t.endpoint.clone(),
        service_name: t
            .service_name
            .clone()
            .unwrap_or_else(|| "corral".to_owned()),
        sample_millionths: t.sample_millionths,
        service_version: crate::VERSION.to_owned(),
    };
    corral_telemetry::Exporter::start(&settings)
        .map(Some)
        .map_err(|e| CliError::line(Exit::Error, format!("error[{}]: {e}", e.code())))
}

/// The config `--preset NAME --root DIR` stands for: the preset, rooted at the directory
/// (created if missing), with its state in `.corral` under it.
fn preset_config(preset: &str, root: Option<&Path>) -> Result<corral_config::Loaded, CliError> {
    let root = context::root_dir(root)?;
    std::fs::create_dir_all(&root).map_err(|e| {
        CliError::usage(format!("cannot create the root `{}`: {e}", root.display()))
    })?;
    let text = format!(
        "version: 1\npreset: {preset}\nroot: {}\nstate_dir: .corral\n",
        serde_json::to_string(&root.to_string_lossy()).unwrap_or_default()
    );
    let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    corral_config::load_str("--preset", &text, &base, &corral_config::ProcessEnv)
        .map_err(|e| CliError::config(&e))
}

/// Runs `corral serve` until the server stops.
pub fn run(a: Args) -> CliResult {
    // Strict: `true`, `false` or unset; anything else refuses to start.
    let learning = corral_server::learning::LearningSetup::from_env()
        .map_err(|e| CliError::line(Exit::Error, e.to_string()))?;
    let (loaded, config_path) = match &a.preset {
        Some(preset) => (preset_config(preset, a.root.as_deref())?, None),
        None => {
            let path = context::config_path(a.config.clone());
            (context::load_for_serve(&path)?, Some(path))
        }
    };
    let exporter = telemetry(&loaded)?;
    init_logging(exporter.as_ref());
    if let Some(e) = &exporter {
        tracing::info!(url = e.url(), "exporting traces over OTLP");
    }
    let rt = context::runtime(Threads::Many)?;
    let opts = ServeOptions {
        loaded,
        config_path,
        listen: a.listen,
        allow_open: a.allow_open,
        max_body_bytes: a.max_body_bytes,
        learning,
    };
    let served = rt.block_on(serve(opts));
    if let Some(e) = exporter {
        // Off the runtime: the SDK's shutdown blocks until its thread sent the last batch.
        e.shutdown();
    }
    served.map_err(|e| match e {
        // Each unmet precondition is its own `error[code]: ...` line.
        corral_server::serve::ServeError::Learning(r) => CliError::line(Exit::Error, r.to_string()),
        e => CliError::coded(e.code(), &e),
    })?;
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    /// With `telemetry:` absent, corral's spans are disabled callsites: nothing is built or
    /// formatted for them on a call.
    #[test]
    fn without_telemetry_the_spans_are_disabled() {
        tracing::subscriber::with_default(super::subscriber(None), || {
            let span = tracing::info_span!(target: corral_telemetry::TARGET, "corral.call");
            assert!(span.is_disabled());
            // The log's own lines still are.
            assert!(tracing::enabled!(tracing::Level::INFO));
        });
    }
}
