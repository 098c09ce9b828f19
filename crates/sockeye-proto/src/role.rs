//! The small vocabulary the engine's parts share: which end a connection is ([`Role`]), the kind
//! of a data message ([`DataKind`]) and where a client's mask keys come from ([`MaskKeySource`]).
//!
//! A leaf of the crate's import graph: the connection, the configuration, permessage-deflate and
//! prepared messages all name these, and this file names none of them, so none of those files
//! has to import another for them (no circles between files).

/// Which end of the connection this is. Clients mask what they send; servers require masks (§5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The end that opened the connection.
    Client,
    /// The end that accepted it.
    Server,
}

/// The kind of data message being sent in fragments (§5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// A text message.
    Text,
    /// A binary message.
    Binary,
}

/// Where a mask key comes from. RFC 6455 §10.3 asks for an unpredictable key per frame; the I/O layer
/// supplies one from the operating system's random source; tests supply fixed keys.
pub type MaskKeySource = Box<dyn FnMut() -> [u8; 4] + Send + Sync>;
