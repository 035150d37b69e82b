//! `corral confirm ACTION_ID [--deny]`: a person approves (or denies) a pending guarded call.

use crate::context;
use crate::{CliResult, Exit, Format};

/// Sends the decision and reports the action's new state.
pub fn run(
    action_id: &str,
    deny: bool,
    server: Option<String>,
    token_env: Option<&str>,
    format: Format,
) -> CliResult {
    let (client, rt) = context::remote(server, token_env)?;
    match rt.block_on(client.decide(action_id, !deny)) {
        Ok(v) => {
            match format {
                Format::Json => crate::output::print_json(&v),
                Format::Human => {
                    let op = v["action"]["op"].as_str().unwrap_or("?");
                    if deny {
                        outln!("denied action {action_id} ({op})");
                    } else {
                        outln!(
                            "approved action {action_id} ({op}): retry the same call with the same arguments to run it, once"
                        );
                    }
                }
            }
            Ok(Exit::Ok)
        }
        Err(e) => Err(context::remote_error(e)),
    }
}
