//! The fan-out server of uWebSockets' `broadcast_test`, written with Sockeye's in-process hub the
//! way `bench/peers/uws/broadcast.cpp` is written with uWS topics: every connection subscribes to
//! one topic when it opens, and every message it sends is published to the topic, to every
//! subscriber, **sender included** (`Hub::publish`; `pubsub-server` leaves the sender out, as a
//! chat room does, so `broadcast_test`, which counts N² echoes per iteration, needs this one).
//!
//! `broadcast-server PORT` — single-threaded, permessage-deflate off (as the uWS server has it);
//! prints `ready` once listening. Each connection is split: its reading half publishes, a writer
//! task drains its subscriber in batches and flushes once per batch (as `ws broadcast_server`
//! does, `crates/sockeye-cli/src/relay.rs`).

use futures_util::StreamExt;
use sockeye_pubsub::{Delivery, Hub, SubscriberConfig, Topic};
use tokio::net::TcpListener;

type Error = Box<dyn std::error::Error>;

/// Deliveries written to a socket before one flush.
const BATCH: usize = 256;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port] = &args[..] else {
        return Err("usage: broadcast-server PORT".into());
    };
    let port: u16 = port.parse()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let hub = Hub::in_process();
        let topic = Topic::new("b")?;
        let mut config = sockeye::Config::default();
        config.protocol.deflate = None;
        let server = sockeye::Server::from_listener(listener, config);
        println!("ready");
        server
            .serve(move |ws, _| {
                let (hub, topic) = (hub.clone(), topic.clone());
                async move {
                    let mut subscriber = hub.subscriber(SubscriberConfig::default());
                    if let Err(e) = subscriber.subscribe(&topic, None).await {
                        eprintln!("broadcast-server: cannot subscribe: {e}");
                        return;
                    }
                    let (mut sink, mut stream) = ws.split();
                    let writer = tokio::spawn(async move {
                        let mut batch = Vec::new();
                        while let Some(Ok(first)) = subscriber.recv().await {
                            batch.push(first);
                            if subscriber.try_recv_many(&mut batch, BATCH - 1).is_err() {
                                return;
                            }
                            for d in batch.drain(..) {
                                if let Delivery::Message(m) = d
                                    && sink.feed_prepared(m.prepared()).await.is_err()
                                {
                                    return;
                                }
                            }
                            if sink.flush().await.is_err() {
                                return;
                            }
                        }
                    });
                    while let Some(Ok(message)) = stream.next().await {
                        if message.is_data()
                            && let Err(e) = hub.publish(&topic, message).await
                        {
                            eprintln!("broadcast-server: publish failed: {e}");
                            break;
                        }
                    }
                    writer.abort();
                }
            })
            .await?;
        Ok(())
    })
}
