//! corral-mcp's integration tests: one binary. The handler (`CorralMcp`) is served over an
//! in-memory pipe to a real rmcp client, in front of a `Gateway` over the `inproc-mock` backend.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod tools;
