//! The publish API and the admin endpoints.

pub mod admin;
pub mod admin_auth;
pub mod publish;
