//! Kill a node: its clients reconnect (the library's reconnecting client) to another node and
//! resume from their last position, with no loss and no duplicate, over Redis and over NATS
//! JetStream.
//!
//! Three nodes (a hub and a WebSocket server each, every one on its own runtime so that it can
//! be killed: its runtime is dropped, its sockets closed without a closing handshake) share one
//! backplane. A subscriber on node A receives each publication as `offset@epoch\npayload`; a
//! publisher on node C publishes `N` numbered messages. Midway, node A is killed; the
//! subscriber's request factory then connects to node B with `?since=offset@epoch` of the last
//! publication it received, and B's hub recovers the rest from the backplane's history.
#![cfg(all(feature = "redis", feature = "nats"))]
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use sockeye::reconnect::{Event, ReconnectConfig, ReconnectingClient};
use sockeye::{Message, Server};
use sockeye_pubsub::{Delivery, HistoryConfig, Hub, HubConfig, Position, SubscriberConfig, Topic};
use support::servers::{BackplaneServer, Kind};
use tokio::time::timeout;

const N: usize = 300;

/// A node on its own runtime; dropping it kills it.
struct Node {
    port: u16,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Node {
    fn start(backplane: &str) -> Node {
        let backplane = backplane.to_string();
        // Built and started on a thread of its own: the test's runtime cannot block on another.
        std::thread::spawn(move || Node::start_here(&backplane))
            .join()
            .unwrap()
    }

    fn start_here(backplane: &str) -> Node {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let backplane = backplane.to_string();
        let port = runtime.block_on(async move {
            let hub = Hub::connect(&backplane, HubConfig::default(), HistoryConfig::default())
                .await
                .unwrap();
            let server = Server::bind("127.0.0.1:0", sockeye::Config::default())
                .await
                .unwrap();
            let port = server.local_addr().unwrap().port();
            tokio::spawn(server.serve_requests(move |ws, request, _peer| {
                let hub = hub.clone();
                async move { serve(hub, ws, request).await }
            }));
            port
        });
        Node {
            port,
            runtime: Some(runtime),
        }
    }

    fn url(&self, query: &str) -> String {
        format!("ws://127.0.0.1:{}/room{query}", self.port)
    }

    /// Kills it: every task and socket of its runtime goes at once.
    fn kill(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One connection: subscribe (resuming from `?since=offset@epoch`), say "ready", then relay.
async fn serve(hub: Hub, ws: sockeye::WebSocket<sockeye::TransportStream>, request: http::Request<()>) {
    let topic = Topic::new(request.uri().path()).unwrap();
    let since = request
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("since="))
        .and_then(|s| {
            let (offset, epoch) = s.split_once('@')?;
            Some(Position {
                epoch: epoch.into(),
                offset: offset.parse().ok()?,
            })
        });
    let (mut sink, mut stream) = ws.split();
    let mut me = hub.subscriber(SubscriberConfig::default());
    me.subscribe(&topic, since).await.unwrap();
    sink.send("ready").await.unwrap();
    let publisher = me.publisher();
    let writer = tokio::spawn(async move {
        while let Some(Ok(d)) = me.recv().await {
            let line = match d {
                Delivery::Message(m) if m.position().is_some() => {
                    let p = m.position().unwrap();
                    format!(
                        "{}@{}\n{}",
                        p.offset,
                        p.epoch,
                        String::from_utf8_lossy(m.message().as_payload())
                    )
                }
                Delivery::Gap { .. } => "gap".to_string(),
                _ => continue,
            };
            if sink.send(line).await.is_err() {
                break;
            }
        }
    });
    while let Some(Ok(m)) = stream.next().await {
        if m.is_data() {
            publisher.publish(&topic, m).await.unwrap();
        }
    }
    writer.abort();
}

async fn scenario(kind: Kind) {
    let server = BackplaneServer::start(kind);
    let mut a = Node::start(&server.url());
    let b = Node::start(&server.url());
    let c = Node::start(&server.url());

    // The subscriber: node A first, node B after; resumes from the last position it received.
    let last: Arc<Mutex<Option<String>>> = Arc::default();
    let urls = [a.url(""), b.url("")];
    let resume = last.clone();
    let mut subscriber = ReconnectingClient::with_factory(move |attempt| {
        let base = &urls[usize::from(attempt.number > 1)];
        let url = match &*resume.lock().unwrap() {
            Some(pos) => format!("{base}?since={pos}"),
            None => base.clone(),
        };
        sockeye::IntoClientRequest::into_client_request(url)
    })
    .reconnect(ReconnectConfig::default().first_delay(Duration::from_millis(20)))
    .start();
    let mut ready = 0;
    let mut connected = 0;
    let mut received: Vec<usize> = Vec::new();
    let (mut publisher, _) = sockeye::connect(c.url("").as_str()).await.unwrap();
    assert_eq!(publisher.next().await.unwrap().unwrap(), Message::text("ready"));
    let mut publisher = Some(publisher);
    let mut publishing = None;
    let mut killed = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while received.len() < N {
        let event = timeout(deadline - tokio::time::Instant::now(), subscriber.next())
            .await
            .unwrap_or_else(|_| panic!("{kind:?}: {} of {N} received", received.len()))
            .unwrap();
        match event {
            Event::Connected { .. } => connected += 1,
            Event::Message(Message::Text(t)) if t.as_str() == "ready" => {
                ready += 1;
                // Publish only once the subscriber is subscribed.
                if let Some(mut p) = publisher.take() {
                    publishing = Some(tokio::spawn(async move {
                        for i in 0..N {
                            p.send(format!("p{i}")).await.unwrap();
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        p
                    }));
                }
            }
            Event::Message(Message::Text(t)) => {
                let (position, payload) = t
                    .as_str()
                    .split_once('\n')
                    .unwrap_or_else(|| panic!("{kind:?}: {t}"));
                let i: usize = payload.strip_prefix('p').unwrap().parse().unwrap();
                assert_eq!(i, received.len(), "{kind:?}: a gap or a duplicate at {i}");
                received.push(i);
                *last.lock().unwrap() = Some(position.to_string());
                if received.len() == N / 3 && !killed {
                    a.kill();
                    killed = true;
                }
            }
            Event::Message(other) => panic!("{kind:?}: {other:?}"),
            Event::Disconnected(_) | Event::Reconnecting { .. } => {}
            other => panic!("{kind:?}: {other:?}"),
        }
    }
    assert!(killed);
    assert_eq!(connected, 2, "{kind:?}: one reconnection, to node B");
    assert_eq!(ready, 2);
    publishing.unwrap().await.unwrap();
    // Nothing more comes: no late duplicate.
    if let Ok(Some(Event::Message(m))) = timeout(Duration::from_millis(300), subscriber.next()).await {
        panic!("{kind:?}: unexpected {m:?}");
    }
    drop((b, c));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_client_resumes_on_another_node_over_redis() {
    scenario(Kind::Redis { persistent: false }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_client_resumes_on_another_node_over_nats_jetstream() {
    scenario(Kind::Nats { jetstream: true }).await;
}
