//! What the integration tests share.

pub(crate) mod clusters;
pub(crate) mod deliveries;
pub(crate) mod proxy;
pub(crate) mod servers;
pub(crate) mod traffic;
