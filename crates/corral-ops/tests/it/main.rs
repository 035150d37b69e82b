//! Integration tests of corral-ops, one module per op family.

mod files;
mod http;
