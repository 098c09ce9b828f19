//! axum: one server for a web page and its WebSocket. The page (at `/`) opens a socket to
//! `/ws`, echoes text and binary messages of several sizes through it with permessage-deflate,
//! and writes PASS or FAIL into the page — the Chromium interop test loads it headless.
//!
//! ```sh
//! cargo run --example axum --features axum -- 127.0.0.1:8080
//! ```

use axum::response::{Html, Response};
use axum::routing::get;
use futures_util::StreamExt;
use sockeye::upgrade::{Upgrade, UpgradedWebSocket};

const PAGE: &str = include_str!("axum_page.html");

/// The handler: the extractor checked the request; the closure runs once the socket is switched.
async fn socket(upgrade: Upgrade) -> Response {
    upgrade.on_upgrade(echo)
}

async fn echo(mut ws: UpgradedWebSocket) {
    while let Some(Ok(message)) = ws.next().await {
        if message.is_data() && ws.feed(message).await.is_err() {
            break;
        }
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8080".into());
    let app = axum::Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/ws", get(socket));
    let listener = tokio::net::TcpListener::bind(addr.as_str()).await?;
    println!("page on http://{}/", listener.local_addr()?);
    axum::serve(listener, app).await
}
