//! corral-lab's integration tests: one binary, a module per concern.
