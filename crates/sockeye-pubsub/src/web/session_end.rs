//! A WebSocket session's end, as an operator sees it: why it ended and the close code the node
//! sent ([`SessionEnd`], counted in `/metrics`), and the one log line each session gets, at
//! info, when it ends (its client's address, how long it lasted, why, and the messages each
//! way). No line is logged per HTTP request: a scrape of `/metrics` every few seconds would
//! bury the sessions.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sockeye::CloseCode;

use crate::session::Ended;

/// Why a session ended, as a metrics label, and the close code the node sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SessionEnd {
    /// `client`, `shutdown`, `too_slow`, `not_published`, `gap`, `refused`, `hub_stopped` or
    /// `token_expired`.
    pub(crate) reason: &'static str,
    /// The code the node closed with; `None` when the client closed first or dropped.
    pub(crate) code: Option<u16>,
}

impl SessionEnd {
    /// The end of a session that returned `ended`, `shutting_down` if the node was.
    pub(crate) fn of(ended: &Ended, shutting_down: bool) -> SessionEnd {
        let (reason, code) = match ended {
            Ended::Disconnected if shutting_down => ("shutdown", Some(CloseCode::GOING_AWAY)),
            Ended::Disconnected => ("client", None),
            Ended::TooSlow => ("too_slow", Some(CloseCode::POLICY_VIOLATION)),
            Ended::NotPublished(e) => ("not_published", Some(e.close_frame().code)),
            Ended::Gap { .. } => ("gap", Some(CloseCode::TRY_AGAIN_LATER)),
            Ended::Refused(frame) => ("refused", Some(frame.code)),
            Ended::HubStopped => ("hub_stopped", Some(CloseCode::TRY_AGAIN_LATER)),
            Ended::Expired => (
                "token_expired",
                Some(CloseCode(super::refusal::RefusalKind::TokenExpired.close_code())),
            ),
        };
        SessionEnd {
            reason,
            code: code.map(|CloseCode(code)| code),
        }
    }
}

/// A session's messages each way, counted as they pass (a relaxed add each).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Messages the client sent.
    pub(crate) received: AtomicU64,
    /// Deliveries sent to the client (publications, gap and drop notices).
    pub(crate) sent: AtomicU64,
}

impl Tally {
    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The session's one log line, at info.
pub(crate) fn log(peer: Option<IpAddr>, started: Instant, tally: &Tally, end: SessionEnd) {
    let peer = peer.map_or_else(|| "-".to_owned(), |p| p.to_string());
    let code = end.code.map_or_else(|| "none".to_owned(), |c| c.to_string());
    tracing::info!(
        peer = %peer,
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        reason = end.reason,
        close_code = %code,
        received = tally.received.load(Ordering::Relaxed),
        sent = tally.sent.load(Ordering::Relaxed),
        "WebSocket session ended"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_end_has_a_reason_and_the_code_the_node_sent() {
        let of = |ended: &Ended, down| SessionEnd::of(ended, down);
        assert_eq!(
            of(&Ended::Disconnected, false),
            SessionEnd {
                reason: "client",
                code: None
            }
        );
        assert_eq!(of(&Ended::Disconnected, true).code, Some(1001));
        assert_eq!(of(&Ended::TooSlow, false).code, Some(1008));
        assert_eq!(of(&Ended::HubStopped, false).reason, "hub_stopped");
    }
}
