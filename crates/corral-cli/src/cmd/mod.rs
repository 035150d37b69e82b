//! One module per subcommand; what they share (config, runtime, server, caller) is in
//! `crate::context`.

pub mod agents;
pub mod audit;
pub mod call;
pub mod check_config;
pub mod confirm;
pub mod describe;
pub mod doctor;
pub mod explain;
pub mod healthcheck;
pub mod help;
pub mod init;
pub mod mcp;
pub mod run;
pub mod sandbox;
pub mod serve;
