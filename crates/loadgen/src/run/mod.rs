//! Runs: planning, coordinating workers, sampling servers, assembling the report.

pub mod assemble;
pub mod coordinator;
pub mod fleet;
pub mod plan;
pub mod progress;
pub mod publish_cmd;
pub mod servers;
