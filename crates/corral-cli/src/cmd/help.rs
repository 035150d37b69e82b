//! `corral help`: the reference card (`corral help reference`), or the help of a subcommand.

use clap::CommandFactory as _;

use crate::error::CliError;
use crate::{Cli, CliResult, Exit};

/// Prints the reference card (`topic` = `reference`), the help of the subcommand `topic` names
/// (`corral help sandbox scenarios`), or the top-level help (no topic).
pub fn run(topic: &[String]) -> CliResult {
    if let [only] = topic
        && only == "reference"
    {
        crate::output::write_stdout(format_args!("{}", corral_server::REFERENCE_CARD));
        return Ok(Exit::Ok);
    }
    let mut command = Cli::command();
    // Built, so that a subcommand's usage line names its whole path (`corral sandbox ...`).
    command.build();
    let mut at = &mut command;
    for (i, word) in topic.iter().enumerate() {
        let names: Vec<String> = at
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        at = match at.find_subcommand_mut(word) {
            Some(sub) => sub,
            None => {
                let path = topic[..i].join(" ");
                let within = if path.is_empty() {
                    "corral".to_owned()
                } else {
                    format!("corral {path}")
                };
                return Err(CliError::usage(format!(
                    "`{within}` has no subcommand `{word}`; `corral help reference` prints the reference card, and the subcommands here are: {}",
                    names.join(", ")
                )));
            }
        };
    }
    let help = at.render_long_help();
    crate::output::write_stdout(format_args!("{help}"));
    Ok(Exit::Ok)
}
