//! What a token check answers: a [`Grant`] (an access and its expiry) or a [`Refused`]; below
//! both `auth` (the checks) and `jwt` (JSON Web Tokens), which re-export them.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::access::{Access, AccessRules};

/// What a client's token grants: what the connection may do, and until when. An open socket
/// is closed with 4002 (`token_expired`) at `expires` unless the client sends a fresh token
/// first (a `refresh` request, docs/pubsub-protocol.md), which must grant the same `access`.
/// An [`Access`] alone converts into a grant that never expires.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The topics the connection may subscribe to and publish on.
    pub access: Access,
    /// When the token expires (its `exp`); `None`: never.
    pub expires: Option<SystemTime>,
}

impl Grant {
    /// `access`, without expiry.
    pub fn new(access: Access) -> Grant {
        Grant {
            access,
            expires: None,
        }
    }

    /// Expiring at `at`.
    #[must_use]
    pub fn expires(mut self, at: SystemTime) -> Grant {
        self.expires = Some(at);
        self
    }
}

impl From<Access> for Grant {
    fn from(access: Access) -> Grant {
        Grant::new(access)
    }
}

/// Why a client's connection is refused, with what to tell it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// No token, or one that is not valid (a bad signature, expired): 401.
    Unauthorized(String),
    /// A valid token that may not connect: 403.
    Forbidden(String),
}

/// `rules` granted with a token's string claims as values, expiring at its `exp`.
pub(crate) fn grant(rules: &AccessRules, claims: &HashMap<String, serde_json::Value>) -> Grant {
    let access = rules.grant(|name| claims.get(name).and_then(|v| v.as_str()).map(str::to_owned));
    let expires = claims
        .get("exp")
        // Whole seconds, or a number with a fraction (RFC 7519's NumericDate allows both).
        .and_then(|exp| {
            exp.as_u64()
                .or_else(|| exp.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        })
        .and_then(|exp| UNIX_EPOCH.checked_add(Duration::from_secs(exp)));
    Grant { access, expires }
}

/// A connection without a token.
pub(crate) fn missing() -> Refused {
    Refused::Unauthorized("this node needs a token: connect to /?token=…".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_read_as_whole_or_fractional_seconds_and_never_panics() {
        let rules = AccessRules::new();
        let exp = |v: serde_json::Value| grant(&rules, &HashMap::from([("exp".to_owned(), v)])).expires;
        let at = |s: u64| Some(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(exp(serde_json::json!(1_790_000_000)), at(1_790_000_000));
        assert_eq!(exp(serde_json::json!(1_790_000_000.7)), at(1_790_000_000));
        assert_eq!(exp(serde_json::json!("1790000000")), None);
        assert_eq!(exp(serde_json::json!(-5)), None);
        // Past what the clock holds: no expiry rather than a panic.
        let _ = exp(serde_json::json!(u64::MAX));
        let _ = exp(serde_json::json!(1e300));
    }
}
