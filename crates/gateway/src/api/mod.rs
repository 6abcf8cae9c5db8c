//! The publish API and the admin endpoints.

pub mod admin;
pub mod admin_auth;
pub mod console;
pub mod control;
pub mod cors;
pub mod history;
pub mod publish;
pub mod query;
