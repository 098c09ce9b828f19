//! [`JwtKeys`]: the public keys a [`Jwt`](super::jwt::Jwt) checks tokens with, swappable while
//! it runs (an identity provider rotates its keys), and [`JwtKeys::refresh`], the loop that
//! keeps them fresh from a fetch the caller provides (an HTTP GET of a `jwks_uri`): every
//! [`Refresh::every`], and at once when a token names a `kid` the set does not hold — at most
//! once per [`Refresh::min_gap`], so forged `kid`s cannot make the node hammer the key server.
//!
//! A check takes the current set (a read lock held for an `Arc` clone, never across a fetch)
//! and verifies against it; a token refused while a refetch is in flight is refused, the next
//! one after the swap is taken.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::sync::Notify;

/// A key that cannot be used: what is wrong with it, for the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadKey(pub String);

impl std::fmt::Display for BadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadKey {}

/// One key: its `kid` (if any), the one algorithm it verifies, the key.
pub(super) struct Key {
    pub(super) kid: Option<String>,
    pub(super) alg: Algorithm,
    pub(super) key: DecodingKey,
}

/// The keys of a [`Jwt`](super::jwt::Jwt), shared with it: [`replace`](JwtKeys::replace)
/// swaps them for every check that starts after it. Cloning shares the same set.
#[derive(Clone)]
pub struct JwtKeys {
    shared: Arc<Shared>,
}

struct Shared {
    keys: RwLock<Arc<[Key]>>,
    /// Woken by a check that met a `kid` the set does not hold (a permit is kept if nobody
    /// waits, so none is lost).
    unknown_kid: Notify,
}

impl std::fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = self.current();
        f.debug_list()
            .entries(keys.iter().map(|k| (&k.kid, k.alg)))
            .finish()
    }
}

impl JwtKeys {
    pub(super) fn new(keys: Vec<Key>) -> JwtKeys {
        JwtKeys {
            shared: Arc::new(Shared {
                keys: RwLock::new(keys.into()),
                unknown_kid: Notify::new(),
            }),
        }
    }

    /// The set now (the lock is held only to clone the `Arc`).
    pub(super) fn current(&self) -> Arc<[Key]> {
        self.shared
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Said by a check: a token named a `kid` that is not in the set. Never waits.
    pub(super) fn unknown_kid(&self) {
        self.shared.unknown_kid.notify_one();
    }

    /// Installs the usable keys of `set` (RS256, ES256, EdDSA; see
    /// [`Jwt::jwks`](super::jwt::Jwt::jwks)) in place of the current ones, for every check that
    /// starts after; returns how many were taken. A set with none is refused and the current
    /// keys are kept.
    pub fn replace(&self, set: &JwkSet) -> Result<usize, BadKey> {
        let keys = usable(set)?;
        let n = keys.len();
        *self.shared.keys.write().unwrap_or_else(PoisonError::into_inner) = keys.into();
        Ok(n)
    }

    /// As [`replace`](JwtKeys::replace), from the JSON of a key set (`{"keys":[…]}`).
    pub fn replace_json(&self, json: &[u8]) -> Result<usize, BadKey> {
        self.replace(&parse(json)?)
    }

    /// Keeps the keys fresh with `fetch` (the body of the key set's URL, or why not), as
    /// `refresh` says; the first set is the one the keys hold already. A failed fetch or an
    /// unusable set is logged as a warning and the last good set kept. Runs until dropped
    /// (spawn it, and abort the task to stop).
    pub async fn refresh<F, Fut>(self, refresh: Refresh, mut fetch: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Vec<u8>, String>>,
    {
        let mut clock = Schedule::new(refresh, Instant::now());
        loop {
            let due = clock.due();
            if clock.asked {
                tokio::time::sleep_until(due).await;
            } else {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    () = self.shared.unknown_kid.notified() => {
                        clock.asked = true;
                        continue;
                    }
                }
            }
            clock.fetched(Instant::now());
            match fetch()
                .await
                .and_then(|body| self.replace_json(&body).map_err(|e| e.0))
            {
                Ok(n) => tracing::debug!(keys = n, "the JWT key set was refreshed"),
                Err(e) => {
                    tracing::warn!("the JWT key set could not be refreshed (the last one is kept): {e}")
                }
            }
        }
    }
}

/// How [`JwtKeys::refresh`] fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refresh {
    /// Between two fetches. Default 5 minutes.
    pub every: Duration,
    /// At least this long between two fetches asked for by an unknown `kid` (a later one
    /// waits for the end of the window). Default 30 s.
    pub min_gap: Duration,
}

impl Default for Refresh {
    fn default() -> Refresh {
        Refresh {
            every: Duration::from_secs(300),
            min_gap: Duration::from_secs(30),
        }
    }
}

impl Refresh {
    /// With fetches `every` apart.
    #[must_use]
    pub fn every(mut self, every: Duration) -> Refresh {
        self.every = every;
        self
    }

    /// With refetches for an unknown `kid` at least `min_gap` apart.
    #[must_use]
    pub fn min_gap(mut self, min_gap: Duration) -> Refresh {
        self.min_gap = min_gap;
        self
    }
}

/// When the next fetch is due; the clock is given, not read, so it is tested without waiting
/// (tokio's, which a paused test runtime moves).
#[derive(Debug)]
struct Schedule {
    refresh: Refresh,
    /// The last fetch.
    last: Instant,
    /// The last fetch an unknown `kid` asked for.
    last_asked: Option<Instant>,
    /// An unknown `kid` waits for a fetch.
    asked: bool,
}

impl Schedule {
    fn new(refresh: Refresh, now: Instant) -> Schedule {
        Schedule {
            refresh,
            last: now,
            last_asked: None,
            asked: false,
        }
    }

    fn due(&self) -> Instant {
        let periodic = self.last + self.refresh.every;
        if !self.asked {
            return periodic;
        }
        match self.last_asked {
            // Asked for the first time: at once.
            None => self.last,
            Some(at) => periodic.min((at + self.refresh.min_gap).max(self.last)),
        }
    }

    fn fetched(&mut self, now: Instant) {
        self.last = now;
        if self.asked {
            self.last_asked = Some(now);
            self.asked = false;
        }
    }
}

fn parse(json: &[u8]) -> Result<JwkSet, BadKey> {
    serde_json::from_slice(json)
        .map_err(|e| BadKey(format!("not a JSON Web Key Set ({{\"keys\":[…]}}): {e}")))
}

/// The keys of a key set in JSON; see [`Jwt::jwks`](super::jwt::Jwt::jwks).
pub(super) fn parse_usable(json: &[u8]) -> Result<Vec<Key>, BadKey> {
    usable(&parse(json)?)
}

/// The RSA (RS256), P-256 (ES256) and Ed25519 (EdDSA) keys of `set`; none is refused.
fn usable(set: &JwkSet) -> Result<Vec<Key>, BadKey> {
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let alg = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Algorithm::RS256,
            AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => Algorithm::ES256,
            AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => Algorithm::EdDSA,
            _ => continue,
        };
        // A key that names another algorithm than its type's is skipped, not guessed at.
        if jwk
            .common
            .key_algorithm
            .is_some_and(|a| a.to_string() != format!("{alg:?}"))
        {
            continue;
        }
        if let Ok(key) = DecodingKey::from_jwk(jwk) {
            keys.push(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                key,
            });
        }
    }
    if keys.is_empty() {
        return Err(BadKey(
            "the key set holds no RSA, P-256 or Ed25519 public key (RS256, ES256, EdDSA)".into(),
        ));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECS: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn unknown_kids_refetch_at_once_then_once_per_window() {
        let t0 = Instant::now();
        let mut s = Schedule::new(Refresh::default(), t0);
        assert_eq!(s.due(), t0 + SECS(300), "periodic");
        // A forged kid at 10 s: fetched at once.
        s.asked = true;
        assert_eq!(s.due(), t0);
        s.fetched(t0 + SECS(10));
        assert!(!s.asked);
        assert_eq!(s.due(), t0 + SECS(310));
        // Another at 11 s: waits for the end of the window (40 s), not sooner.
        s.asked = true;
        assert_eq!(s.due(), t0 + SECS(40));
        s.fetched(t0 + SECS(40));
        // A flood of asks counts as one: the next fetch is again 30 s on.
        s.asked = true;
        assert_eq!(s.due(), t0 + SECS(70));
        // The periodic fetch comes first when it is sooner.
        let mut s = Schedule::new(Refresh::default().every(SECS(20)), t0);
        s.asked = true;
        s.fetched(t0);
        s.asked = true;
        assert_eq!(s.due(), t0 + SECS(20));
    }

    #[test]
    fn a_window_past_starts_at_once() {
        let t0 = Instant::now();
        let mut s = Schedule::new(Refresh::default(), t0);
        s.asked = true;
        s.fetched(t0);
        s.fetched(t0 + SECS(100)); // periodic, or anything later
        s.asked = true;
        assert_eq!(s.due(), t0 + SECS(100), "the window ended long ago");
    }

    #[test]
    fn a_replace_without_usable_keys_keeps_the_old_ones() {
        let keys = JwtKeys::new(Vec::new());
        assert!(keys.replace_json(br#"{"keys":[]}"#).is_err());
        assert!(keys.replace_json(b"nope").is_err());
        let rsa = r#"{"keys":[{"kty":"RSA","kid":"r","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"}]}"#;
        assert_eq!(keys.replace_json(rsa.as_bytes()), Ok(1));
        assert!(
            keys.replace_json(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#)
                .is_err()
        );
        assert_eq!(keys.current()[0].kid.as_deref(), Some("r"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_refetches_for_a_kid_without_hammering() {
        let keys = JwtKeys::new(Vec::new());
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = count.clone();
        let task = crate::task::spawn(keys.clone().refresh(Refresh::default(), move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Err::<Vec<u8>, _>("down".to_string()) }
        }));
        let fetches = || count.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(SECS(1)).await;
        assert_eq!(fetches(), 0);
        for _ in 0..100 {
            keys.unknown_kid();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // 10 s of forged kids: one fetch at once, the next not before 30 s.
        assert_eq!(fetches(), 1);
        tokio::time::sleep(SECS(25)).await;
        assert_eq!(
            fetches(),
            2,
            "the kid asked within the window is served at its end"
        );
        tokio::time::sleep(SECS(300)).await;
        assert_eq!(fetches(), 3, "periodic");
        task.abort();
    }
}
