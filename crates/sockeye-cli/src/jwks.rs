//! `pubsub_server --jwks-url`: the clients' JWT keys from an identity provider's key set URL,
//! fetched at start (the node does not start without a usable set), then kept fresh by
//! `JwtKeys::refresh` (`sockeye_pubsub::web::jwt`) with [`KeySetUrl::get`]: one GET on a new
//! connection (`curl::connect`), bounded in time and size, 200 only, no redirect followed.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use sockeye::tls::ClientTlsOptions;
use sockeye::tls::rustls::ClientConfig;
use sockeye_pubsub::web::jwt::{Jwt, Refresh};

use crate::curl::{connect, http_url};
use crate::failure::Failure;

/// A fetch's whole time: connecting, TLS, the answer and its body.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest key set taken (a provider's holds a few keys of under 1 KiB each).
const MAX_BODY: usize = 1 << 20;

/// Where the key set is, and the TLS configuration for https:// (built on first use, with the
/// system's roots).
#[derive(Debug, Clone)]
struct KeySetUrl {
    url: Uri,
    tls: Arc<OnceLock<Arc<ClientConfig>>>,
}

impl KeySetUrl {
    /// The key set's body, or why not, in one line.
    async fn get(&self) -> Result<Vec<u8>, String> {
        match tokio::time::timeout(FETCH_TIMEOUT, self.fetch()).await {
            Ok(result) => result.map_err(|e| e.message),
            Err(_) => Err(format!(
                "{}: no complete answer within {} s",
                self.url,
                FETCH_TIMEOUT.as_secs()
            )),
        }
    }

    async fn fetch(&self) -> Result<Vec<u8>, Failure> {
        let url = &self.url;
        let tls = || match self.tls.get() {
            Some(config) => Ok(config.clone()),
            None => {
                let config = ClientTlsOptions::default().build()?;
                Ok(self.tls.get_or_init(|| config).clone())
            }
        };
        let mut sender = connect(url, tls, FETCH_TIMEOUT, "the key set's fetch timeout").await?;
        let host = url.authority().map_or("", |a| a.as_str());
        let request = Request::get(url.path_and_query().map_or("/", |p| p.as_str()))
            .header(header::HOST, host)
            .header(header::ACCEPT, "application/json")
            .header(
                header::USER_AGENT,
                format!("ws/{} (sockeye)", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::new()))
            .map_err(|e| Failure::new(format!("{url}: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| Failure::new(format!("{url}: {e}")))?;
        let status = response.status();
        if status != StatusCode::OK {
            let more = if status.is_redirection() {
                " (redirects are not followed: give the key set's own URL)"
            } else {
                ""
            };
            return Err(Failure::new(format!(
                "{url}: the server answered {status}, not 200{more}"
            )));
        }
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<LengthLimitError>() {
                    Failure::new(format!(
                        "{url}: the key set is larger than {} KiB",
                        MAX_BODY / 1024
                    ))
                } else {
                    Failure::new(format!("{url}: {e}"))
                }
            })?;
        Ok(body.to_bytes().to_vec())
    }
}

/// `--jwks-url`: checks with the set at `url`, fetched now (a failure is the node's, at start:
/// a usage error naming the flag), refreshed by a spawned task as `refresh` says.
pub(crate) async fn jwt_from_url(url: &str, refresh: Refresh) -> Result<Jwt, Failure> {
    let source = KeySetUrl {
        url: http_url(url).map_err(|e| Failure::usage(format!("--jwks-url {url}: {e}")))?,
        tls: Arc::default(),
    };
    let failed = |e: String| Failure::usage(format!("--jwks-url {url}: cannot use the key set: {e}"));
    let body = source.get().await.map_err(failed)?;
    let jwt = Jwt::jwks(&body).map_err(|e| failed(e.0))?;
    tokio::spawn(jwt.keys().refresh(refresh, move || {
        let source = source.clone();
        async move { source.get().await }
    }));
    Ok(jwt)
}
