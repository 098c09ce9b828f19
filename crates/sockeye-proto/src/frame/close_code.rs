//! Close codes, RFC 6455 §7.4.
//!
//! A leaf of the crate's import graph: the close frame (`CloseFrame`) reports
//! protocol violations, and the errors (`ProtocolViolation`, in `error.rs`) map each
//! violation to a close code, so the codes live apart from both and neither file imports the
//! other.

/// A status code in a close frame (RFC 6455 §7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseCode(pub u16);

impl CloseCode {
    /// 1000: normal closure.
    pub const NORMAL: CloseCode = CloseCode(1000);
    /// 1001: the endpoint is going away (server shutting down, browser leaving the page).
    pub const GOING_AWAY: CloseCode = CloseCode(1001);
    /// 1002: protocol error.
    pub const PROTOCOL_ERROR: CloseCode = CloseCode(1002);
    /// 1003: a data type the endpoint cannot accept.
    pub const UNSUPPORTED_DATA: CloseCode = CloseCode(1003);
    /// 1005: no status code was present. Reported locally, never sent (§7.4.1).
    pub const NO_STATUS: CloseCode = CloseCode(1005);
    /// 1006: the connection closed without a close frame. Reported locally, never sent (§7.4.1).
    pub const ABNORMAL: CloseCode = CloseCode(1006);
    /// 1007: a text message was not valid UTF-8.
    pub const INVALID_PAYLOAD: CloseCode = CloseCode(1007);
    /// 1008: a message violated the endpoint's policy.
    pub const POLICY_VIOLATION: CloseCode = CloseCode(1008);
    /// 1009: a message was too big to process.
    pub const MESSAGE_TOO_BIG: CloseCode = CloseCode(1009);
    /// 1010: the client expected an extension the server did not negotiate.
    pub const MANDATORY_EXTENSION: CloseCode = CloseCode(1010);
    /// 1011: the server hit an unexpected condition.
    pub const INTERNAL_ERROR: CloseCode = CloseCode(1011);
    /// 1012: the server is restarting; reconnect (IANA registry).
    pub const SERVICE_RESTART: CloseCode = CloseCode(1012);
    /// 1013: the server is overloaded or a service it needs is unavailable; try again later
    /// (IANA registry).
    pub const TRY_AGAIN_LATER: CloseCode = CloseCode(1013);
    /// 1015: the TLS handshake failed. Reported locally, never sent (§7.4.1).
    pub const TLS_HANDSHAKE: CloseCode = CloseCode(1015);

    /// Whether this code may appear in a close frame on the wire (§7.4.1, §7.4.2): the defined codes
    /// 1000–1003 and 1007–1011, 1012–1014 (registered with IANA since), and 3000–4999 for libraries
    /// and applications. 1004–1006, 1015, 0–999, 1016–2999 and 5000+ are not allowed.
    pub fn is_sendable(self) -> bool {
        matches!(self.0, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}

impl From<u16> for CloseCode {
    fn from(code: u16) -> Self {
        CloseCode(code)
    }
}

impl std::fmt::Display for CloseCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sendable_codes_follow_section_7_4() {
        for code in [
            1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999,
        ] {
            assert!(CloseCode(code).is_sendable(), "{code}");
        }
        for code in [
            0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
        ] {
            assert!(!CloseCode(code).is_sendable(), "{code}");
        }
    }
}
