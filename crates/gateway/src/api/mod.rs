//! The publish API and the admin endpoints.

pub(crate) mod admin;
pub(crate) mod admin_auth;
pub(crate) mod console;
pub(crate) mod control;
pub(crate) mod cors;
pub(crate) mod history;
pub(crate) mod publish;
pub(crate) mod query;
