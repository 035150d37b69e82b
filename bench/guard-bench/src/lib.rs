//! Nothing here: the benchmark is `benches/guard.rs` (`cargo bench -p guard-bench`).
