//! Corral's lab: scenarios of steps and mocks, the agents under test (variants) that run them
//! through the one guard chain, scorers, synthetic inputs, and the before/after comparison
//! verdict. It stores nothing itself: the store keeps scenarios, runs, outputs and comparisons.

pub mod agent;
pub mod inspect;
pub mod judge;
pub mod playback;
pub mod pool;
pub mod program;
pub mod replay;
pub mod runner;
pub mod scenario;
pub mod score;
pub mod service;
pub mod shadow;
pub mod synthetic;
pub mod task;
pub mod tournament;
pub mod variant;
pub mod verdict;
pub mod workflow;
pub mod world;
