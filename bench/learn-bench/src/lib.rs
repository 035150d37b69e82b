//! learn-bench: see benches/learn.rs.
