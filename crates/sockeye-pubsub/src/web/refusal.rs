//! Turning a client away from the WebSocket at `/`, told so that it can act: every kind of
//! refusal has one close code, one HTTP status and one name, here and nowhere else
//! (docs/pubsub-protocol.md, "Refusals").
//!
//! A browser learns nothing from an HTTP refusal of its WebSocket: the page sees close code 1006
//! and the reason is lost (the WHATWG WebSocket API hides the response), so a client retries
//! a bad token forever. A request that carries `Origin` comes from a browser (every browser
//! sends it with a WebSocket; other clients rarely do): it is upgraded and then closed at once
//! with the code and a reason `"<name>: <why>"`. Other clients get the HTTP status and the JSON
//! error `{"error":{"code":"<name>","message":"<why>"}}`, which they can read.

use http::StatusCode;
use sockeye::{CloseCode, CloseFrame};

/// Why a client's WebSocket is refused, as the client is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// No token, or one that is not valid (a bad signature, expired, not yet valid, another
    /// issuer or audience). Close 4001, HTTP 401.
    Unauthorized,
    /// The token of an open connection expired and was not refreshed in time. Close 4002 (an
    /// open connection only: at the upgrade an expired token is [`Unauthorized`](Self::Unauthorized)).
    TokenExpired,
    /// A valid token that may not connect. Close 4003, HTTP 403.
    NotAllowed,
    /// A page of an origin this node does not serve (`--allowed-origin`). Close 4004, HTTP 403.
    OriginNotAllowed,
    /// The client's address holds as many connections as the node allows it. Close 4029,
    /// HTTP 503; retryable.
    TooManyConnections,
    /// The node serves as many connections as it allows. Close 1013 (RFC 6455 §7.4.1 "try again
    /// later", the registered code for it), HTTP 503; retryable.
    NodeFull,
}

impl RefusalKind {
    /// The close code a browser gets: 4000–4999 are the application's (RFC 6455 §7.4.2).
    pub fn close_code(self) -> u16 {
        match self {
            RefusalKind::Unauthorized => 4001,
            RefusalKind::TokenExpired => 4002,
            RefusalKind::NotAllowed => 4003,
            RefusalKind::OriginNotAllowed => 4004,
            RefusalKind::TooManyConnections => 4029,
            RefusalKind::NodeFull => 1013,
        }
    }

    /// The name in the close reason and in the JSON error's `code`.
    pub fn name(self) -> &'static str {
        match self {
            RefusalKind::Unauthorized => "unauthorized",
            RefusalKind::TokenExpired => "token_expired",
            RefusalKind::NotAllowed => "not_allowed",
            RefusalKind::OriginNotAllowed => "origin_not_allowed",
            RefusalKind::TooManyConnections => "too_many_connections",
            RefusalKind::NodeFull => "node_full",
        }
    }

    /// Whether the same request may succeed later without the client changing anything: it
    /// reconnects with backoff. The others need something new (a token) or never will.
    pub fn retryable(self) -> bool {
        matches!(self, RefusalKind::TooManyConnections | RefusalKind::NodeFull)
    }

    /// Every kind, for the documentation's table and the tests that keep it true.
    pub fn all() -> [RefusalKind; 6] {
        [
            RefusalKind::Unauthorized,
            RefusalKind::TokenExpired,
            RefusalKind::NotAllowed,
            RefusalKind::OriginNotAllowed,
            RefusalKind::TooManyConnections,
            RefusalKind::NodeFull,
        ]
    }

    /// The HTTP status a client that is not a browser gets.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            RefusalKind::Unauthorized | RefusalKind::TokenExpired => StatusCode::UNAUTHORIZED,
            RefusalKind::NotAllowed | RefusalKind::OriginNotAllowed => StatusCode::FORBIDDEN,
            RefusalKind::TooManyConnections | RefusalKind::NodeFull => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The close frame that tells a connection: the code, and `"<name>: <why>"` cut to the 123
    /// bytes a close reason may hold (RFC 6455 §5.5: a control frame's payload is at most 125
    /// bytes, two of them the code), on a character boundary.
    pub fn close_frame(self, why: &str) -> CloseFrame {
        let mut reason = format!("{}: {why}", self.name());
        if reason.len() > 123 {
            let mut end = 123;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        CloseFrame::new(CloseCode::from(self.close_code()), reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_are_distinct_and_reasons_fit_a_close_frame() {
        let kinds = RefusalKind::all();
        let codes: std::collections::HashSet<_> = kinds.iter().map(|k| k.close_code()).collect();
        let names: std::collections::HashSet<_> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!((codes.len(), names.len()), (kinds.len(), kinds.len()));
        let long = "é".repeat(200);
        for kind in kinds {
            let frame = kind.close_frame(&long);
            assert!(frame.reason.len() <= 123, "{}", frame.reason.len());
            assert!(frame.reason.starts_with(kind.name()), "{}", frame.reason);
            assert_eq!(frame.code.0, kind.close_code());
        }
    }

    /// The protocol document's table is this one (the JavaScript client's test holds its own
    /// `REFUSALS` to the same table).
    #[test]
    fn the_protocol_document_lists_every_refusal() {
        let doc = include_str!("../../../../docs/pubsub-protocol.md");
        let section = &doc[doc.find("## Refusals").unwrap()..doc.find("## Metrics").unwrap()];
        let rows: Vec<(u16, String, u16, bool)> = section
            .lines()
            .filter_map(|line| {
                let mut cells = line.strip_prefix("| ")?.split(" | ");
                let code = cells.next()?.parse().ok()?;
                let kind = cells.next()?.trim_matches('`').to_owned();
                let status = cells.next()?.parse().ok()?;
                let retry = cells.next()? == "retry";
                Some((code, kind, status, retry))
            })
            .collect();
        let ours: Vec<(u16, String, u16, bool)> = RefusalKind::all()
            .iter()
            .map(|k| {
                (
                    k.close_code(),
                    k.name().to_owned(),
                    k.status().as_u16(),
                    k.retryable(),
                )
            })
            .collect();
        assert_eq!(rows, ours);
    }
}
