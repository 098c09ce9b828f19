//! Connecting through a proxy: HTTP CONNECT or SOCKS5, from a URL or from the environment.
//!
//! ```sh
//! cargo run --example proxy -- ws://echo.example/ socks5h://user:secret@127.0.0.1:1080
//! HTTPS_PROXY=http://127.0.0.1:3128 cargo run --example proxy -- wss://echo.example/
//! ```

use sockeye::proxy::{Proxy, ProxyConfig};
use sockeye::{Config, Message};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or("usage: proxy URL [PROXY_URL]")?;
    let proxy = match args.next() {
        Some(proxy) => ProxyConfig::Url(Proxy::parse(&proxy)?),
        // https_proxy / http_proxy / all_proxy, minus no_proxy, as curl reads them.
        None => ProxyConfig::Environment,
    };
    let config = Config::builder().proxy(proxy).build();
    let (mut ws, _) = sockeye::connect_with(url.as_str(), &config).await?;
    ws.send("hello through the proxy").await?;
    if let Some(reply) = ws.recv().await {
        match reply? {
            Message::Text(text) => println!("{text}"),
            other => println!("{other:?}"),
        }
    }
    ws.close(None).await?;
    Ok(())
}
