//! Workers: the part of a run that holds client connections.
//!
//! A worker runs either inside the coordinator's process or as a child process (the same
//! executable, re-run with a hidden `__worker` subcommand) when one process cannot hold all
//! the sockets (a process may have at most 20,000 open files here).

pub(crate) mod link;
pub(crate) mod protocol;
pub(crate) mod run;
