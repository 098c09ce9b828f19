//! Who a WebSocket client is: the `token` of its query string, checked by a callback that
//! returns what the connection may do ([`Access`]) or refuses it ([`Refused`]: 401 or 403,
//! before the upgrade). Checks provided: [`shared_token`], [`jwt_hs256`] and, for other
//! algorithms, keys from PEM or JWKS, `iss` and `aud`, [`Jwt`].
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

use std::sync::Arc;

use super::grant::missing;
pub use super::grant::{Grant, Refused};
use super::jwt::Jwt;
use crate::access::{Access, AccessRules};

/// The check of [`WebConfig::authorize`](super::WebConfig::authorize).
pub(crate) type Authorize = Arc<dyn Fn(Option<&str>) -> Result<Grant, Refused> + Send + Sync>;

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
/// no leeway; the connection expires with it) and `sub` (required) are checked, and `rules`
/// are granted with the token's string claims as values (`user/{sub}` grants `user/alice` to a
/// token with `"sub":"alice"`). For other algorithms, keys, `iss`, `aud`: [`Jwt`].
pub fn jwt_hs256(
    secret: &[u8],
    rules: AccessRules,
) -> impl Fn(Option<&str>) -> Result<Grant, Refused> + Send + Sync + 'static {
    // An empty secret (anyone could sign) cannot be refused here, where nothing fails: every
    // token is refused instead, saying why; `Jwt::hs256` refuses it at start.
    let check = Jwt::hs256(secret).map(|jwt| jwt.authorize(rules));
    move |given| match &check {
        Ok(check) => check(given),
        Err(e) => Err(Refused::Unauthorized(format!(
            "this node cannot check tokens: {e}"
        ))),
    }
}

/// Compares in time that depends on the lengths only, not on where the bytes differ.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
