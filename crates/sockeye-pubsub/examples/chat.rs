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
//! (`memory:`). Each connection is a [`Session`] with a protocol of the chat's own: a client too
//! slow to read is closed with 1008, a publication the backplane will not take with 1013.

use std::time::Duration;

use sockeye::{Config, Message, Server};
use sockeye_pubsub::{
    Delivery, HistoryConfig, Hub, HubConfig, OnGap, Outgoing, Position, Protocol, Recovery, Request, Session,
    SessionConfig, Topic,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().as_deref().unwrap_or("8001").parse()?;
    let backplane = args.next().unwrap_or_else(|| "memory:".into());
    let history = HistoryConfig::new(1000, Duration::from_secs(600));
    let hub = Hub::connect(&backplane, HubConfig::default(), history).await?;
    let server = Server::bind(("127.0.0.1", port), Config::default()).await?;
    eprintln!("chat node on ws://127.0.0.1:{port}/rooms/NAME over {backplane}");
    // A gap is a line in the room, and the chat goes on.
    let config = SessionConfig::default().on_gap(OnGap::Deliver);
    server
        .serve_requests(move |mut ws, request, peer| {
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
                let mut me = Session::new(&hub, Lines(room.clone()), config);
                match me.subscribe(&room, since).await {
                    Ok(Recovery::Recovered { count }) => eprintln!("{peer}: back in {room}, {count} missed"),
                    Ok(_) => eprintln!("{peer}: joined {room}"),
                    Err(e) => {
                        eprintln!("{peer}: {e}");
                        let _ = ws.close(Some(e.close_frame())).await;
                        return;
                    }
                }
                let ended = me.run(ws).await;
                eprintln!("{peer}: left {room} ({ended:?})");
            }
        })
        .await?;
    Ok(())
}

/// The chat's protocol: each text line a client sends goes to the room; each line it receives
/// is prefixed with its position, and a gap is a line of its own.
struct Lines(Topic);

impl Protocol for Lines {
    fn request(&self, message: Message) -> Request {
        match message {
            Message::Text(_) => Request::Publish {
                topic: self.0.clone(),
                message,
            },
            _ => Request::Ignore,
        }
    }

    fn outgoing<'a>(&self, delivery: &'a Delivery) -> Outgoing<'a> {
        match delivery {
            Delivery::Message(m) => match (m.position(), m.message()) {
                (Some(p), Message::Text(text)) => {
                    Outgoing::Message(format!("[{}@{}] {text}", p.offset, p.epoch).into())
                }
                _ => Outgoing::Nothing,
            },
            Delivery::Gap { .. } => Outgoing::Message("[missed messages could not be recovered]".into()),
            _ => Outgoing::Nothing,
        }
    }
}

/// `offset@epoch`, as the chat prints it.
fn parse_position(s: &str) -> Option<Position> {
    let (offset, epoch) = s.split_once('@')?;
    Some(Position {
        epoch: epoch.into(),
        offset: offset.parse().ok()?,
    })
}
