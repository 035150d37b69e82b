//! Nothing here: the benchmark is `benches/lab.rs` (`cargo bench -p lab-bench`).
