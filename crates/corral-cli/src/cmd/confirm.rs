//! `corral confirm ACTION_ID [--deny]`: a person approves (or denies) a pending guarded call.

use crate::context;
use crate::{CliResult, Exit, Format, Remote};

/// Sends the decision and reports the action's new state.
pub fn run(action_id: &str, deny: bool, remote: Remote) -> CliResult {
    let format = remote.format;
    let (client, rt) = context::remote(remote.server, remote.token_env.as_deref())?;
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
