//! Who a WebSocket client is: the `token` of its query string, checked by a callback that
//! returns what the connection may do ([`Access`]) or refuses it ([`Refused`]: 401 or 403,
//! before the upgrade). Two checks are provided: [`shared_token`] and [`jwt_hs256`].
//!
//! ```
//! use sockeye_pubsub::access::AccessRules;
//! use sockeye_pubsub::web::{auth, WebConfig};
//!
//! let rules = AccessRules::new().subscribe("user/{sub}")?.subscribe("global")?;
//! let config = WebConfig::default().authorize(auth::jwt_hs256(b"secret", rules));
//! # let _ = config;
//! # Ok::<(), sockeye_pubsub::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use crate::access::{Access, AccessRules};

/// The check of [`WebConfig::authorize`](super::WebConfig::authorize).
pub(crate) type Authorize = Arc<dyn Fn(Option<&str>) -> Result<Access, Refused> + Send + Sync>;

/// Why a client's connection is refused, with what to tell it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// No token, or one that is not valid (a bad signature, expired): 401.
    Unauthorized(String),
    /// A valid token that may not connect: 403.
    Forbidden(String),
}

/// One token every client shares: a client with it is granted `rules` (without values: a
/// rule with a `{placeholder}` grants nothing), any other is refused with 401.
pub fn shared_token(
    token: impl Into<String>,
    rules: AccessRules,
) -> impl Fn(Option<&str>) -> Result<Access, Refused> + Send + Sync + 'static {
    let token = token.into();
    let access = rules.grant(|_| None);
    move |given| match given {
        Some(given) if same(given.as_bytes(), token.as_bytes()) => Ok(access.clone()),
        Some(_) => Err(Refused::Unauthorized("the token is not this node's".into())),
        None => Err(missing()),
    }
}

/// JSON Web Tokens signed with HS256 and `secret` (RFC 7519): the signature, `exp` (required,
/// no leeway) and `sub` (required) are checked, and `rules` are granted with the token's string
/// claims as values (`user/{sub}` grants `user/alice` to a token with `"sub":"alice"`).
pub fn jwt_hs256(
    secret: &[u8],
    rules: AccessRules,
) -> impl Fn(Option<&str>) -> Result<Access, Refused> + Send + Sync + 'static {
    use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
    let key = DecodingKey::from_secret(secret);
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 0;
    validation.set_required_spec_claims(&["exp", "sub"]);
    move |given| {
        let token = given.ok_or_else(missing)?;
        let claims = decode::<HashMap<String, serde_json::Value>>(token, &key, &validation)
            .map_err(|e| Refused::Unauthorized(format!("the token was refused: {e}")))?
            .claims;
        Ok(rules.grant(|name| claims.get(name).and_then(|v| v.as_str()).map(str::to_owned)))
    }
}

fn missing() -> Refused {
    Refused::Unauthorized("this node needs a token: connect to /?token=…".into())
}

/// Compares in time that depends on the lengths only, not on where the bytes differ.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
