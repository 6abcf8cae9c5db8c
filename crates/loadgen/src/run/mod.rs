//! Runs: planning, coordinating workers, sampling servers, assembling the report.

pub(crate) mod assemble;
pub(crate) mod coordinator;
pub(crate) mod fleet;
pub(crate) mod plan;
pub(crate) mod progress;
pub(crate) mod publish_cmd;
pub(crate) mod servers;
