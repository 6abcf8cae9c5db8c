//! The publish API and the admin endpoints.

pub mod admin;
pub mod cors;
pub mod publish;
