//! `corral healthcheck`: `GET /healthz` on a server, for container health checks.
//!
//! Exit 0 when the server answers `"status": "ok"`, 1 when it answers anything else or cannot
//! be reached in time (Docker's `HEALTHCHECK` reads 1 as unhealthy and reserves 2), 2 for a
//! URL that cannot be used.

use std::time::Duration;

use corral_client::{Client, ClientError};

use crate::{Exit, Format};

/// Runs `corral healthcheck`.
pub fn run(server: Option<String>, timeout: Duration, format: Format) -> Exit {
    let server = super::call::server_url(server);
    let client = match Client::new(&server, None) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Error;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return Exit::Error;
        }
    };
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
            if healthy { Exit::Ok } else { Exit::Findings }
        }
        Ok(Err(e @ ClientError::InvalidUrl { .. })) => {
            eprintln!("error: {e}");
            Exit::Error
        }
        Ok(Err(e)) => {
            eprintln!("unhealthy: {server}: {e}");
            Exit::Findings
        }
        Err(_) => {
            eprintln!(
                "unhealthy: {server}: no answer within {} ms",
                timeout.as_millis()
            );
            Exit::Findings
        }
    }
}
