//! Tokens on open sockets: a socket is closed with 4002 (`token_expired`) when its token
//! expires without a refresh, kept when the client refreshes it (`{"type":"refresh"}`) with a
//! token for the same identity, and a refresh for another identity or with a bad token is
//! refused without changing anything.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sockeye::{Message, WebSocket};
use sockeye_pubsub::access::{Access, AccessRules};
use sockeye_pubsub::json_protocol::JsonProtocol;
use sockeye_pubsub::web::jwt::Jwt;
use sockeye_pubsub::web::{AuthRefused, Grant, Web, WebConfig, auth};
use sockeye_pubsub::{Ended, Hub, OnGap, Session, SessionConfig};
use tokio::net::TcpListener;

async fn node(config: WebConfig) -> SocketAddr {
    let web = Web::new(Hub::in_process(), config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(web.serve_connection(hyper_util::rt::TokioIo::new(tcp), web.router()));
        }
    });
    addr
}

type Client = WebSocket<sockeye::TransportStream>;

async fn client(addr: SocketAddr, query: &str) -> Client {
    sockeye::connect(format!("ws://{addr}/{query}").as_str())
        .await
        .unwrap()
        .0
}

/// The next frame: a JSON text frame, or the close as `{"close":CODE,"reason":R}`.
async fn next(ws: &mut Client) -> Value {
    let message = tokio::time::timeout(Duration::from_secs(10), ws.recv())
        .await
        .expect("a frame in 10 s");
    match message {
        Some(Ok(Message::Text(text))) => serde_json::from_str(text.as_str()).unwrap(),
        Some(Ok(Message::Close(Some(frame)))) => {
            json!({"close": frame.code.0, "reason": frame.reason.as_str()})
        }
        other => panic!("not a text or close frame: {other:?}"),
    }
}

async fn request(ws: &mut Client, frame: Value) -> Value {
    ws.send(Message::text(frame.to_string())).await.unwrap();
    next(ws).await
}

/// Tokens `USER:MILLIS`: `USER` may subscribe to `user/USER`, for MILLIS ms from the check.
fn by_name(token: Option<&str>) -> Result<Grant, AuthRefused> {
    let (user, millis) = token
        .and_then(|t| t.split_once(':'))
        .and_then(|(user, ms)| Some((user.to_owned(), ms.parse::<u64>().ok()?)))
        .ok_or_else(|| AuthRefused::Unauthorized("not a token".into()))?;
    let access = AccessRules::new()
        .subscribe("user/{sub}")
        .unwrap()
        .grant(|claim| (claim == "sub").then(|| user.clone()));
    Ok(Grant::new(access).expires(SystemTime::now() + Duration::from_millis(millis)))
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test]
async fn a_socket_is_closed_with_4002_when_its_jwt_expires() {
    let rules = AccessRules::new().subscribe("user/{sub}").unwrap();
    let addr = node(WebConfig::default().authorize(auth::jwt_hs256(b"k", rules))).await;
    let claims = json!({"sub": "alice", "exp": now_secs() + 2});
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(b"k"),
    )
    .unwrap();
    let mut ws = client(addr, &format!("?token={token}")).await;
    let ok = request(&mut ws, json!({"type":"subscribe","topic":"user/alice"})).await;
    assert_eq!(ok["type"], "subscribed");
    let started = std::time::Instant::now();
    let closed = next(&mut ws).await;
    assert_eq!(closed["close"], 4002, "{closed}");
    assert!(
        closed["reason"].as_str().unwrap().starts_with("token_expired: "),
        "{closed}"
    );
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_refreshed_socket_is_kept_and_a_refresh_for_another_user_is_refused() {
    let addr = node(WebConfig::default().authorize(by_name)).await;
    let mut ws = client(addr, "?token=alice:600").await;
    let fresh = request(&mut ws, json!({"type":"refresh","token":"alice:60000","id":1})).await;
    assert_eq!(
        (fresh["type"].as_str(), fresh["id"].as_i64()),
        (Some("refreshed"), Some(1)),
        "{fresh}"
    );
    let expires = fresh["expires"].as_u64().unwrap();
    assert!(
        (now_secs() + 58..=now_secs() + 61).contains(&expires),
        "{expires}"
    );

    // Another user's token, and a bad one: refused, the socket up and still alice's.
    let bob = request(&mut ws, json!({"type":"refresh","token":"bob:60000","id":2})).await;
    assert_eq!(
        (bob["type"].as_str(), bob["code"].as_str()),
        (Some("error"), Some("unauthorized")),
        "{bob}"
    );
    assert!(bob["message"].as_str().unwrap().contains("another user"), "{bob}");
    let bad = request(&mut ws, json!({"type":"refresh","token":"nope","id":3})).await;
    assert_eq!(bad["code"], "unauthorized", "{bad}");
    let empty = request(&mut ws, json!({"type":"refresh","token":"","id":4})).await;
    assert_eq!(empty["code"], "bad_request", "{empty}");

    // Past the first token's expiry: still open, and still alice's.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let own = request(&mut ws, json!({"type":"subscribe","topic":"user/alice"})).await;
    assert_eq!(own["type"], "subscribed", "{own}");
    let other = request(&mut ws, json!({"type":"subscribe","topic":"user/bob"})).await;
    assert_eq!(other["code"], "not_allowed", "{other}");
}

#[tokio::test]
async fn a_refused_refresh_leaves_the_expiry_as_it_was() {
    let addr = node(WebConfig::default().authorize(by_name)).await;
    let mut ws = client(addr, "?token=alice:700").await;
    let bob = request(&mut ws, json!({"type":"refresh","token":"bob:60000"})).await;
    assert_eq!(bob["code"], "unauthorized");
    let closed = next(&mut ws).await;
    assert_eq!(closed["close"], 4002, "{closed}");
}

#[tokio::test]
async fn a_grant_without_expiry_never_closes_and_a_refresh_answers_null() {
    let addr =
        node(WebConfig::default().authorize(|_: Option<&str>| Ok::<_, AuthRefused>(Access::everything())))
            .await;
    let mut ws = client(addr, "?token=x").await;
    let fresh = request(&mut ws, json!({"type":"refresh","token":"y"})).await;
    assert_eq!(fresh, json!({"type":"refreshed","expires":null}));
}

/// A JSON protocol session over an in-memory pipe, on tokio's paused clock: the deadline is the
/// session's own timer.
fn session_pair(
    expires_in: Duration,
    refresh_for: Duration,
) -> (WebSocket<tokio::io::DuplexStream>, tokio::task::JoinHandle<Ended>) {
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let config = sockeye::Config::builder().keepalive(None).build();
    let server = WebSocket::from_upgraded(server_io, sockeye::Role::Server, &config, &[], None);
    let client = WebSocket::from_upgraded(client_io, sockeye::Role::Client, &config, &[], None);
    let hub = Hub::in_process();
    let protocol =
        JsonProtocol::new(Access::everything(), hub.max_payload()).refresh(move |token| match token {
            "good" => Ok(Some(SystemTime::now() + refresh_for)),
            _ => Err("bad token".into()),
        });
    let close = sockeye::CloseFrame::new(sockeye::CloseCode::from(4002), "token_expired: test");
    let session = Session::new(&hub, protocol, SessionConfig::default().on_gap(OnGap::Deliver))
        .expires(SystemTime::now() + expires_in, close);
    (client, tokio::spawn(session.run(server)))
}

async fn pipe_next(ws: &mut WebSocket<tokio::io::DuplexStream>) -> Value {
    match ws.recv().await {
        Some(Ok(Message::Text(text))) => serde_json::from_str(text.as_str()).unwrap(),
        Some(Ok(Message::Close(Some(frame)))) => json!({"close": frame.code.0}),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_session_expires_on_the_paused_clock_unless_refreshed() {
    let (mut ws, ended) = session_pair(Duration::from_secs(60), Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_secs(59)).await;
    ws.send(Message::text(r#"{"type":"refresh","token":"good","id":1}"#))
        .await
        .unwrap();
    assert_eq!(pipe_next(&mut ws).await["type"], "refreshed");
    // Long past the first expiry: a subscribe is still answered.
    tokio::time::sleep(Duration::from_secs(600)).await;
    ws.send(Message::text(r#"{"type":"subscribe","topic":"t"}"#))
        .await
        .unwrap();
    assert_eq!(pipe_next(&mut ws).await["type"], "subscribed");
    // And the new expiry closes it.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(pipe_next(&mut ws).await["close"], 4002);
    drop(ws);
    assert!(matches!(ended.await.unwrap(), Ended::Expired));

    let (mut ws, ended) = session_pair(Duration::from_secs(60), Duration::from_secs(3600));
    ws.send(Message::text(r#"{"type":"refresh","token":"bad"}"#))
        .await
        .unwrap();
    assert_eq!(pipe_next(&mut ws).await["code"], "unauthorized");
    let before = tokio::time::Instant::now();
    assert_eq!(pipe_next(&mut ws).await["close"], 4002);
    assert!(
        before.elapsed() >= Duration::from_secs(59),
        "{:?}",
        before.elapsed()
    );
    drop(ws);
    assert!(matches!(ended.await.unwrap(), Ended::Expired));
}

// --- JWT: algorithms, keys, claims -------------------------------------------------------------

const KEYS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/keys/");

fn key_file(name: &str) -> Vec<u8> {
    std::fs::read(format!("{KEYS}{name}")).unwrap()
}

fn sign(
    alg: jsonwebtoken::Algorithm,
    key: &jsonwebtoken::EncodingKey,
    kid: Option<&str>,
    claims: Value,
) -> String {
    let mut header = jsonwebtoken::Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

fn alice() -> Value {
    json!({"sub": "alice", "exp": now_secs() + 600})
}

/// Whether a client with `token` is let in (and may then subscribe to `user/alice`).
async fn admitted(addr: SocketAddr, token: &str) -> bool {
    let Ok((mut ws, _)) = sockeye::connect(format!("ws://{addr}/?token={token}").as_str()).await else {
        return false;
    };
    let answer = request(&mut ws, json!({"type":"subscribe","topic":"user/alice"})).await;
    assert_eq!(answer["type"], "subscribed", "{answer}");
    true
}

fn rules() -> AccessRules {
    AccessRules::new().subscribe("user/{sub}").unwrap()
}

#[tokio::test]
async fn rs256_es256_and_eddsa_tokens_are_checked_with_a_public_key_pem() {
    use jsonwebtoken::{Algorithm, EncodingKey};
    let hs = sign(Algorithm::HS256, &EncodingKey::from_secret(b"k"), None, alice());
    let other = sign(
        Algorithm::ES256,
        &EncodingKey::from_ec_pem(&key_file("other-p256.pem")).unwrap(),
        None,
        alice(),
    );
    let cases = [
        (
            "rsa",
            Algorithm::RS256,
            EncodingKey::from_rsa_pem(&key_file("rsa.pem")).unwrap(),
        ),
        (
            "p256",
            Algorithm::ES256,
            EncodingKey::from_ec_pem(&key_file("p256.pem")).unwrap(),
        ),
        (
            "ed25519",
            Algorithm::EdDSA,
            EncodingKey::from_ed_pem(&key_file("ed25519.pem")).unwrap(),
        ),
    ];
    for (name, alg, key) in cases {
        let jwt = Jwt::public_key_pem(&key_file(&format!("{name}.pub.pem"))).unwrap();
        let addr = node(WebConfig::default().authorize(jwt.authorize(rules()))).await;
        assert!(admitted(addr, &sign(alg, &key, None, alice())).await, "{name}");
        assert!(!admitted(addr, &other).await, "{name}: another key's token");
        assert!(!admitted(addr, &hs).await, "{name}: an HS256 token");
        let expired = json!({"sub": "alice", "exp": now_secs() - 10});
        assert!(
            !admitted(addr, &sign(alg, &key, None, expired)).await,
            "{name}: expired"
        );
    }
    assert!(Jwt::public_key_pem(b"-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n").is_err());
    assert!(
        Jwt::public_key_pem(&key_file("p256.pem")).is_err(),
        "a private key is not a public key"
    );
}

#[tokio::test]
async fn a_jwks_picks_the_key_by_kid() {
    use jsonwebtoken::jwk::{Jwk, JwkSet};
    use jsonwebtoken::{Algorithm, EncodingKey};
    let mine = EncodingKey::from_ec_pem(&key_file("p256.pem")).unwrap();
    let other = EncodingKey::from_ec_pem(&key_file("other-p256.pem")).unwrap();
    let mut a = Jwk::from_encoding_key(&mine, Algorithm::ES256).unwrap();
    a.common.key_id = Some("a".into());
    let mut b = Jwk::from_encoding_key(&other, Algorithm::ES256).unwrap();
    b.common.key_id = Some("b".into());
    let set = serde_json::to_vec(&JwkSet {
        keys: vec![a.clone()],
    })
    .unwrap();
    let addr = node(WebConfig::default().authorize(Jwt::jwks(&set).unwrap().authorize(rules()))).await;
    assert!(admitted(addr, &sign(Algorithm::ES256, &mine, Some("a"), alice())).await);
    assert!(
        !admitted(addr, &sign(Algorithm::ES256, &other, Some("b"), alice())).await,
        "unknown kid"
    );
    assert!(
        !admitted(addr, &sign(Algorithm::ES256, &other, Some("a"), alice())).await,
        "kid a, other key"
    );
    assert!(
        admitted(addr, &sign(Algorithm::ES256, &mine, None, alice())).await,
        "no kid: tried"
    );

    let both = serde_json::to_vec(&JwkSet { keys: vec![a, b] }).unwrap();
    let addr = node(WebConfig::default().authorize(Jwt::jwks(&both).unwrap().authorize(rules()))).await;
    assert!(admitted(addr, &sign(Algorithm::ES256, &other, Some("b"), alice())).await);
    assert!(Jwt::jwks(br#"{"keys":[]}"#).is_err());
    assert!(Jwt::jwks(b"not json").is_err());
    assert!(
        Jwt::jwks(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).is_err(),
        "no symmetric key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwts_keys_are_swapped_while_it_runs_and_refetched_for_an_unknown_kid() {
    use jsonwebtoken::jwk::{Jwk, JwkSet};
    use jsonwebtoken::{Algorithm, EncodingKey};
    use sockeye_pubsub::web::jwt::Refresh;
    let old = EncodingKey::from_ec_pem(&key_file("p256.pem")).unwrap();
    let new = EncodingKey::from_ec_pem(&key_file("other-p256.pem")).unwrap();
    let set = |key: &EncodingKey, kid: &str| {
        let mut jwk = Jwk::from_encoding_key(key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(kid.into());
        JwkSet { keys: vec![jwk] }
    };
    let jwt = Jwt::jwks(&serde_json::to_vec(&set(&old, "old")).unwrap()).unwrap();
    let keys = jwt.keys();
    let addr = node(WebConfig::default().authorize(jwt.authorize(rules()))).await;
    assert!(admitted(addr, &sign(Algorithm::ES256, &old, Some("old"), alice())).await);
    // Swapped by hand, after `authorize`: the next check uses the new set.
    assert_eq!(keys.replace(&set(&new, "new")), Ok(1));
    assert!(admitted(addr, &sign(Algorithm::ES256, &new, Some("new"), alice())).await);
    assert!(!admitted(addr, &sign(Algorithm::ES256, &old, Some("old"), alice())).await);
    assert!(
        keys.replace(&JwkSet { keys: vec![] }).is_err(),
        "an empty set is refused"
    );
    assert!(
        admitted(addr, &sign(Algorithm::ES256, &new, Some("new"), alice())).await,
        "and the last kept"
    );

    // The refresh loop: the fetch serves the old key again; a token naming it asks for it.
    let body = serde_json::to_vec(&set(&old, "old")).unwrap();
    let fetches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = fetches.clone();
    let task = tokio::spawn(keys.clone().refresh(Refresh::default(), move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let body = body.clone();
        async move { Ok(body) }
    }));
    let token = sign(Algorithm::ES256, &old, Some("old"), alice());
    let mut tries = 0;
    while !admitted(addr, &token).await {
        tries += 1;
        assert!(tries < 100, "the unknown kid was never fetched");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 1);
    task.abort();
}

#[tokio::test]
async fn nbf_iss_and_aud_are_checked_when_configured() {
    use jsonwebtoken::{Algorithm, EncodingKey};
    let key = EncodingKey::from_secret(b"k");
    let token = |claims: Value| sign(Algorithm::HS256, &key, None, claims);
    let exp = now_secs() + 600;

    // Nothing configured: `aud` and `iss` are not checked (a token carrying `aud` was refused).
    let plain = node(WebConfig::default().authorize(Jwt::hs256(b"k").unwrap().authorize(rules()))).await;
    assert!(
        admitted(
            plain,
            &token(json!({"sub":"alice","exp":exp,"aud":"x","iss":"y"}))
        )
        .await
    );
    // `nbf` is checked when present.
    let early = token(json!({"sub":"alice","exp":exp,"nbf": now_secs() + 300}));
    assert!(!admitted(plain, &early).await, "not yet valid");
    assert!(
        admitted(
            plain,
            &token(json!({"sub":"alice","exp":exp,"nbf": now_secs() - 1}))
        )
        .await
    );

    let jwt = Jwt::hs256(b"k")
        .unwrap()
        .issuer("https://auth.test")
        .audience("chat");
    let strict = node(WebConfig::default().authorize(jwt.authorize(rules()))).await;
    let good = json!({"sub":"alice","exp":exp,"iss":"https://auth.test","aud":["other","chat"]});
    assert!(admitted(strict, &token(good)).await);
    for bad in [
        json!({"sub":"alice","exp":exp,"aud":"chat"}),
        json!({"sub":"alice","exp":exp,"iss":"https://auth.test"}),
        json!({"sub":"alice","exp":exp,"iss":"https://evil.test","aud":"chat"}),
        json!({"sub":"alice","exp":exp,"iss":"https://auth.test","aud":"other"}),
        json!({"sub":"alice","iss":"https://auth.test","aud":"chat"}),
        json!({"exp":exp,"iss":"https://auth.test","aud":"chat"}),
    ] {
        assert!(!admitted(strict, &token(bad.clone())).await, "{bad}");
    }
}

#[tokio::test]
async fn an_empty_secret_is_refused_and_signs_nothing() {
    use jsonwebtoken::{Algorithm, EncodingKey};
    assert!(Jwt::hs256(b"").is_err());
    let addr = node(WebConfig::default().authorize(auth::jwt_hs256(b"", rules()))).await;
    let forged = sign(Algorithm::HS256, &EncodingKey::from_secret(b""), None, alice());
    assert!(!admitted(addr, &forged).await);
}
