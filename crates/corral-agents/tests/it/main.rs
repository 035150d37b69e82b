//! Integration tests for corral-agents: the adapters on recorded real output, the install
//! manager against a stand-in npm, and sessions in the real `linux` backend with the fake agent
//! CLI, its model a scripted upstream served on the session's link.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod adapters;
mod attack_z2;
mod catalog;
mod hold;
mod install;
mod real_clis;
mod select;
mod session;
mod support;
