//! What the integration tests share.

pub(crate) mod servers;
