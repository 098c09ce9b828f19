//! [`Jwt`]: JSON Web Tokens (RFC 7519) checked with `jsonwebtoken`: HS256 with a secret, RS256,
//! ES256 or EdDSA with a public key (PEM) or a key set (JWKS, RFC 7517, chosen by the token's
//! `kid`); `exp` and `sub` required, `nbf` checked when present, `iss` and `aud` when
//! configured (and then required). The grant expires with the token's `exp`.
//!
//! ```
//! use sockeye_pubsub::access::AccessRules;
//! use sockeye_pubsub::web::{jwt::Jwt, WebConfig};
//!
//! let rules = AccessRules::new().subscribe("user/{sub}")?;
//! let jwt = Jwt::hs256(b"a secret of the application")?.issuer("https://auth.example").audience("chat");
//! let config = WebConfig::default().authorize(jwt.authorize(rules));
//! # let _ = config;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};

use super::grant::{Grant, Refused, grant, missing};
pub use super::jwks::{BadKey, JwtKeys, Refresh};
use super::jwks::{Key, parse_usable};
use crate::access::AccessRules;

/// How tokens are checked; build it, then [`authorize`](Jwt::authorize) with the rules. A
/// clone shares its keys ([`keys`](Jwt::keys)).
#[derive(Clone)]
pub struct Jwt {
    keys: JwtKeys,
    issuers: Vec<String>,
    audiences: Vec<String>,
    leeway: u64,
}

impl std::fmt::Debug for Jwt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwt")
            .field("keys", &self.keys)
            .field("issuers", &self.issuers)
            .field("audiences", &self.audiences)
            .field("leeway", &self.leeway)
            .finish()
    }
}

impl Jwt {
    /// Tokens signed with HS256 and `secret`. An empty secret is refused: anyone could sign.
    pub fn hs256(secret: &[u8]) -> Result<Jwt, BadKey> {
        if secret.is_empty() {
            return Err(BadKey("the JWT secret is empty: anyone could sign tokens; give the secret your application signs with".into()));
        }
        Ok(Jwt::with(vec![Key {
            kid: None,
            alg: Algorithm::HS256,
            key: DecodingKey::from_secret(secret),
        }]))
    }

    /// Tokens signed with the private half of the public key `pem` (`-----BEGIN PUBLIC
    /// KEY-----`, or `RSA PUBLIC KEY`): RS256 for an RSA key, ES256 for a P-256 key, EdDSA for
    /// an Ed25519 key.
    pub fn public_key_pem(pem: &[u8]) -> Result<Jwt, BadKey> {
        let (alg, key) = if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
            (Algorithm::RS256, key)
        } else if let Ok(key) = DecodingKey::from_ec_pem(pem) {
            (Algorithm::ES256, key)
        } else if let Ok(key) = DecodingKey::from_ed_pem(pem) {
            (Algorithm::EdDSA, key)
        } else {
            return Err(BadKey(
                "not a PEM public key of RSA, P-256 or Ed25519 (RS256, ES256, EdDSA): give the \
                 `-----BEGIN PUBLIC KEY-----` file of the key your application signs with"
                    .into(),
            ));
        };
        Ok(Jwt::with(vec![Key { kid: None, alg, key }]))
    }

    /// Tokens signed with one of the keys of a JSON Web Key Set (`{"keys":[…]}`, what an
    /// identity provider's `jwks_uri` serves): the one named by the token's `kid` (or, for a
    /// token without `kid`, each key of its algorithm in turn). RSA (RS256), P-256 (ES256) and
    /// Ed25519 (EdDSA) keys are used; others (symmetric keys among them) are skipped. A set with
    /// no usable key is refused. To follow a set that changes, see [`keys`](Jwt::keys).
    pub fn jwks(json: &[u8]) -> Result<Jwt, BadKey> {
        Ok(Jwt::with(parse_usable(json)?))
    }

    fn with(keys: Vec<Key>) -> Jwt {
        Jwt {
            keys: JwtKeys::new(keys),
            issuers: Vec::new(),
            audiences: Vec::new(),
            leeway: 0,
        }
    }

    /// The keys tokens are checked with, shared (also after [`authorize`](Jwt::authorize)):
    /// [`JwtKeys::replace`] swaps them, [`JwtKeys::refresh`] keeps them fresh from a key set's
    /// URL, refetched when a token names an unknown `kid`.
    pub fn keys(&self) -> JwtKeys {
        self.keys.clone()
    }

    /// Requires `iss` to be `issuer` (repeatable: one of them). Default: `iss` not checked.
    #[must_use]
    pub fn issuer(mut self, issuer: impl Into<String>) -> Jwt {
        self.issuers.push(issuer.into());
        self
    }

    /// Requires `aud` to be or hold `audience` (repeatable: one of them). Default: `aud` not
    /// checked (a token carrying one is taken).
    #[must_use]
    pub fn audience(mut self, audience: impl Into<String>) -> Jwt {
        self.audiences.push(audience.into());
        self
    }

    /// How far past `exp` (and before `nbf`) a token is still taken at the upgrade, for clocks
    /// that differ (whole seconds). Default 0. An open socket closes at `exp` itself.
    #[must_use]
    pub fn leeway(mut self, leeway: Duration) -> Jwt {
        self.leeway = leeway.as_secs();
        self
    }

    /// The check for [`WebConfig::authorize`](super::WebConfig::authorize): `rules` granted
    /// with the token's string claims as values, until its `exp`.
    pub fn authorize(
        self,
        rules: AccessRules,
    ) -> impl Fn(Option<&str>) -> Result<Grant, Refused> + Send + Sync + 'static {
        let mut required = vec!["exp", "sub"];
        if !self.issuers.is_empty() {
            required.push("iss");
        }
        if !self.audiences.is_empty() {
            required.push("aud");
        }
        let mut validation = Validation::default();
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&required);
        if !self.issuers.is_empty() {
            validation.set_issuer(&self.issuers);
        }
        if self.audiences.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&self.audiences);
        }
        move |given| {
            let token = given.ok_or_else(missing)?;
            let header = decode_header(token).map_err(|e| refused(&e))?;
            // The set now; a swap during the check changes the next one.
            let keys = self.keys.current();
            let named = |kid: &Option<String>| match (&header.kid, kid) {
                (Some(wanted), Some(kid)) => wanted == kid,
                (Some(_), None) => keys.len() == 1,
                (None, _) => true,
            };
            if !keys.iter().any(|k| named(&k.kid)) {
                // A key set that changed since it was fetched, or a forged kid: a refresh is
                // asked for (rate-limited by its loop), and this token refused.
                self.keys.unknown_kid();
            }
            let mut last = None;
            for Key { kid, alg, key } in keys.iter() {
                if !named(kid) || *alg != header.alg {
                    continue;
                }
                let mut validation = validation.clone();
                validation.algorithms = vec![*alg];
                match decode::<HashMap<String, serde_json::Value>>(token, key, &validation) {
                    Ok(data) => return Ok(grant(&rules, &data.claims)),
                    Err(e) => last = Some(e),
                }
            }
            Err(match last {
                Some(e) => refused(&e),
                None => Refused::Unauthorized(format!(
                    "the token was refused: no key of this node for its algorithm {:?}{}",
                    header.alg,
                    header.kid.map(|k| format!(" and kid {k:?}")).unwrap_or_default()
                )),
            })
        }
    }
}

fn refused(e: &jsonwebtoken::errors::Error) -> Refused {
    Refused::Unauthorized(format!("the token was refused: {e}"))
}
