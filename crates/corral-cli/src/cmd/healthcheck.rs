//! `corral healthcheck`: `GET /healthz` on a server, for container health checks.
//!
//! Exit 0 when the server answers `"status": "ok"`, 1 when it answers anything else or cannot
//! be reached in time (Docker's `HEALTHCHECK` reads 1 as unhealthy and reserves 2), 2 for a
//! URL that cannot be used.

use std::time::Duration;

use corral_client::{Client, ClientError};

use crate::context::{self, Threads};
use crate::{CliError, CliResult, Exit, Format};

/// Runs `corral healthcheck`.
pub fn run(server: Option<String>, timeout: Duration, format: Format) -> CliResult {
    let server = context::server_url(server);
    let client = Client::new(&server, None).map_err(CliError::usage)?;
    let rt = context::runtime(Threads::One)?;
    let answer = rt.block_on(async { tokio::time::timeout(timeout, client.healthz()).await });
    match answer {
        Ok(Ok(h)) => {
            let healthy = h.status == "ok";
            match format {
                Format::Json => crate::output::print_json(&h),
                Format::Human => outln!(
                    "{}: {} (version {}, mode {}, backend {}, storage {})",
                    server,
                    h.status,
                    h.version,
                    h.mode,
                    h.backend,
                    h.storage
                ),
            }
            Ok(if healthy { Exit::Ok } else { Exit::Findings })
        }
        Ok(Err(e @ ClientError::InvalidUrl { .. })) => Err(CliError::usage(e)),
        Ok(Err(e)) => Err(CliError::line(
            Exit::Findings,
            format!("unhealthy: {server}: {e}"),
        )),
        Err(_) => Err(CliError::line(
            Exit::Findings,
            format!(
                "unhealthy: {server}: no answer within {} ms",
                timeout.as_millis()
            ),
        )),
    }
}
