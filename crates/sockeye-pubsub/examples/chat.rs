//! A chat with rooms: one node of as many as you start on the same backplane.
//!
//! ```text
//! bash scripts/install-backplanes.sh && redis-server --port 6379 --save '' &
//! cargo run --release -p sockeye-pubsub --features redis --example chat -- 8001 redis://127.0.0.1:6379 &
//! cargo run --release -p sockeye-pubsub --features redis --example chat -- 8002 redis://127.0.0.1:6379 &
//! cargo run --release -p sockeye-pubsub --features redis --example chat -- 8003 redis://127.0.0.1:6379 &
//! ws chat ws://127.0.0.1:8001/rooms/lobby alice      # and, in other terminals,
//! ws chat ws://127.0.0.1:8003/rooms/lobby bob
//! ```
//!
//! The URL path is the room. Every line a client sends reaches every other client in the room,
//! on every node, prefixed with its position (`[offset@epoch] text`). A client that reconnects
//! with `?since=offset@epoch` first receives what it missed (within the backplane's history),
//! or a line saying what could not be recovered. Without a backplane URL the node is alone
//! (`memory:`).

use std::time::Duration;

use futures_util::StreamExt;
use sockeye::{Config, Message, Server};
use sockeye_pubsub::{Delivery, HistoryConfig, Hub, HubConfig, Position, Recovery, SubscriberConfig, Topic};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().as_deref().unwrap_or("8001").parse()?;
    let backplane = args.next().unwrap_or_else(|| "memory:".into());
    let history = HistoryConfig::new(1000, Duration::from_secs(600));
    let hub = Hub::connect(&backplane, HubConfig::default(), history).await?;
    let server = Server::bind(("127.0.0.1", port), Config::default()).await?;
    eprintln!("chat node on ws://127.0.0.1:{port}/rooms/NAME over {backplane}");
    server
        .serve_requests(move |ws, request, peer| {
            let hub = hub.clone();
            async move {
                let Ok(room) = Topic::new(request.uri().path()) else {
                    return;
                };
                let since = request
                    .uri()
                    .query()
                    .and_then(|q| q.strip_prefix("since="))
                    .and_then(parse_position);
                let (mut sink, mut stream) = ws.split();
                let mut me = hub.subscriber(SubscriberConfig::default());
                match me.subscribe(&room, since).await {
                    Ok(Recovery::Recovered { count }) => eprintln!("{peer}: back in {room}, {count} missed"),
                    Ok(_) => eprintln!("{peer}: joined {room}"),
                    Err(e) => {
                        eprintln!("{peer}: {e}");
                        return;
                    }
                }
                let publisher = me.publisher();
                // Deliveries to the socket in one task, the socket's lines to the room in this one.
                let writer = tokio::spawn(async move {
                    while let Some(Ok(delivery)) = me.recv().await {
                        let line = match delivery {
                            Delivery::Message(m) => match (m.position(), m.message()) {
                                (Some(p), Message::Text(text)) => {
                                    format!("[{}@{}] {text}", p.offset, p.epoch)
                                }
                                _ => continue,
                            },
                            Delivery::Gap { .. } => "[missed messages could not be recovered]".into(),
                            _ => continue,
                        };
                        if sink.send(line).await.is_err() {
                            break;
                        }
                    }
                });
                while let Some(Ok(message)) = stream.next().await {
                    if let Message::Text(_) = message
                        && let Err(e) = publisher.publish(&room, message).await
                    {
                        eprintln!("{peer}: not delivered: {e}");
                    }
                }
                writer.abort();
            }
        })
        .await?;
    Ok(())
}

/// `offset@epoch`, as the chat prints it.
fn parse_position(s: &str) -> Option<Position> {
    let (offset, epoch) = s.split_once('@')?;
    Some(Position {
        epoch: epoch.into(),
        offset: offset.parse().ok()?,
    })
}
