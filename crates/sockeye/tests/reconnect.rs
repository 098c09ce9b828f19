//! The reconnecting client (`sockeye::reconnect`) on loopback: real sockets, servers stopped,
//! restarted, refusing, dead; every wait bounded, no fixed sleeps (each step waits for an event).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Response, Uri};
use sockeye::proxy::ProxyConfig;
use sockeye::reconnect::{
    Disconnect, Event, GiveUp, Offline, ReconnectConfig, ReconnectingClient, SendError,
};
use sockeye::{CloseCode, CloseFrame, Config, Message, WebSocket};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The longest any one step may take.
const STEP: Duration = Duration::from_secs(5);

/// Direct connections (no proxy from the environment), no keepalive noise.
fn config() -> Config {
    Config::builder()
        .proxy(ProxyConfig::Direct)
        .keepalive(None)
        .close_timeout(Duration::from_millis(500))
        .build()
}

/// Short waits, so that the tests run fast; the bounds are checked against the same config.
fn quick() -> ReconnectConfig {
    ReconnectConfig::default()
        .first_delay(Duration::from_millis(20))
        .max_delay(Duration::from_millis(160))
}

/// A connection the test server accepted, with the URL it was asked for.
struct Served {
    ws: WebSocket<TcpStream>,
    uri: Uri,
}

/// A WebSocket server on loopback that hands each connection to the test, or refuses the
/// handshake with a status.
struct TestServer {
    addr: SocketAddr,
    conns: mpsc::UnboundedReceiver<Served>,
    task: JoinHandle<()>,
}

impl TestServer {
    async fn bind(addr: &str) -> TestServer {
        Self::bind_refusing(addr, None).await
    }

    async fn bind_refusing(addr: &str, refuse: Option<u16>) -> TestServer {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, conns) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut uri = None;
                    let accepted = sockeye::accept_with(tcp, &config(), |request, response| {
                        uri = Some(request.uri().clone());
                        match refuse {
                            Some(status) => Err(Response::builder()
                                .status(status)
                                .body("refused".to_string())
                                .unwrap()),
                            None => Ok(response),
                        }
                    })
                    .await;
                    if let (Ok(ws), Some(uri)) = (accepted, uri) {
                        let _ = tx.send(Served { ws, uri });
                    }
                });
            }
        });
        TestServer { addr, conns, task }
    }

    fn url(&self) -> String {
        format!("ws://{}/", self.addr)
    }

    async fn accept(&mut self) -> Served {
        tokio::time::timeout(STEP, self.conns.recv())
            .await
            .expect("no connection in time")
            .unwrap()
    }

    /// Stops listening and drops every connection it accepted.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// A port nobody listens on.
async fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn next(client: &mut ReconnectingClient) -> Event {
    match tokio::time::timeout(STEP, client.next()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the client ended"),
        Err(_) => panic!("no event in time"),
    }
}

/// Skips events until one matches.
async fn until(client: &mut ReconnectingClient, what: &str, matches: impl Fn(&Event) -> bool) -> Event {
    let mut skipped = Vec::new();
    loop {
        let event = match tokio::time::timeout(STEP, client.next()).await {
            Ok(Some(event)) => event,
            Ok(None) => panic!("the client ended before {what}; skipped {skipped:?}"),
            Err(_) => panic!("no {what} in time; skipped {skipped:?}"),
        };
        if matches(&event) {
            return event;
        }
        skipped.push(event);
    }
}

async fn ends(client: &mut ReconnectingClient) {
    let end = tokio::time::timeout(STEP, client.next()).await;
    assert!(matches!(end, Ok(None)), "expected the end, got {end:?}");
}

async fn recv_text(ws: &mut WebSocket<TcpStream>) -> String {
    match tokio::time::timeout(STEP, ws.recv()).await {
        Ok(Some(Ok(Message::Text(t)))) => t.to_string(),
        other => panic!("expected a text message, got {other:?}"),
    }
}

fn delay_of(event: &Event) -> Duration {
    match event {
        Event::Reconnecting { delay, .. } => *delay,
        other => panic!("expected Reconnecting, got {other:?}"),
    }
}

/// A huge multiplier with `Duration::MAX` as the cap: the second wait computed overflowed
/// `Duration::from_secs_f64`, the driver task panicked and the client ended without `GaveUp`.
/// Now the wait is the cap, reported, and the client still answers.
#[tokio::test]
async fn a_wait_past_what_a_duration_holds_is_the_cap_and_the_client_lives_on() {
    let nobody = format!("ws://127.0.0.1:{}/", free_port().await);
    let mut client = ReconnectingClient::builder(nobody)
        .config(config())
        .reconnect(
            ReconnectConfig::default()
                .first_delay(Duration::from_millis(10))
                .multiplier(1e300)
                .max_delay(Duration::MAX)
                .max_attempts(Some(5)),
        )
        .start();
    let mut waits = Vec::new();
    while waits.len() < 2 {
        if let Event::Reconnecting { delay, .. } = next(&mut client).await {
            waits.push(delay);
        }
    }
    assert!(waits[0] <= Duration::from_millis(10), "{waits:?}");
    assert!(waits[1] >= Duration::MAX / 2, "{waits:?}");
    // In that endless wait, the client still takes commands.
    client.close(None);
    ends(&mut client).await;
}

#[test]
fn the_default_final_refusals_are_the_ws_tools() {
    let config = ReconnectConfig::default();
    let closed = |code: u16| Disconnect::Closed {
        frame: Some(CloseFrame::new(CloseCode(code), "")),
        uptime: Duration::ZERO,
    };
    for code in [1002, 1003, 1007, 1008, 1009, 1010, 4000, 4001, 4999] {
        assert!(config.is_final(&closed(code)), "{code}");
    }
    for code in [1000, 1001, 1006, 1011, 1012, 1013, 3000] {
        assert!(!config.is_final(&closed(code)), "{code}");
    }
    let custom = config.final_refusal(|d| matches!(d, Disconnect::Closed { .. }));
    assert!(custom.is_final(&closed(1000)));
}

#[tokio::test]
async fn reconnects_after_the_server_closes_or_drops_the_connection_with_growing_delays() {
    let mut server = TestServer::bind("127.0.0.1:0").await;
    let reconnect = quick();
    let mut client = ReconnectingClient::builder(server.url())
        .config(config())
        .reconnect(reconnect.clone())
        .start();
    let mut served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { attempt, .. } if attempt.number == 1));

    // The server closes (1001, not a refusal): reconnect after the first delay.
    served
        .ws
        .close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "restart")))
        .await
        .unwrap();
    match next(&mut client).await {
        Event::Disconnected(Disconnect::Closed {
            frame: Some(frame), ..
        }) => {
            assert_eq!(frame.code, CloseCode::GOING_AWAY);
        }
        other => panic!("{other:?}"),
    }
    let delay = delay_of(&next(&mut client).await);
    let (low, high) = reconnect.backoff.delay_range(0);
    assert!(low <= delay && delay <= high, "{delay:?}");
    let served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { attempt, .. } if attempt.number == 2));

    // The server drops the connection without a close frame: lost, and the wait doubles (the
    // connection did not stay up `healthy_after`).
    drop(served);
    match next(&mut client).await {
        Event::Disconnected(Disconnect::Lost { .. }) => {}
        other => panic!("{other:?}"),
    }
    let delay = delay_of(&next(&mut client).await);
    let (low, high) = reconnect.backoff.delay_range(1);
    assert!(low <= delay && delay <= high, "{delay:?}");
    let mut served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));

    // And it works.
    client.send("still here").await.unwrap();
    assert_eq!(recv_text(&mut served.ws).await, "still here");
    served.ws.send("hello").await.unwrap();
    assert!(matches!(next(&mut client).await, Event::Message(m) if m == Message::text("hello")));
}

#[tokio::test]
async fn reconnects_after_the_server_restarts_on_the_same_port() {
    let mut server = TestServer::bind("127.0.0.1:0").await;
    let addr = server.addr;
    let reconnect = quick();
    let mut client = ReconnectingClient::builder(server.url())
        .config(config())
        .reconnect(reconnect.clone())
        .start();
    let _served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    server.stop().await;
    drop(_served);

    // Down: the attempts fail, each wait within its bounds, growing up to the cap.
    let mut retry = 0;
    let mut failed = 0;
    while failed < 6 {
        match next(&mut client).await {
            Event::Disconnected(Disconnect::Lost { .. }) => {}
            Event::Disconnected(Disconnect::Failed { attempt, .. }) => {
                failed += 1;
                assert_eq!(attempt.failures, failed - 1);
            }
            Event::Reconnecting { delay, attempt } => {
                let (low, high) = reconnect.backoff.delay_range(retry);
                assert!(low <= delay && delay <= high, "retry {retry}: {delay:?}");
                assert_eq!(attempt.failures, failed);
                retry += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        reconnect.backoff.delay_range(retry).1,
        reconnect.backoff.max,
        "reached the cap"
    );

    let mut server = TestServer::bind(&addr.to_string()).await;
    let mut served = server.accept().await;
    let event = until(&mut client, "Connected", |e| matches!(e, Event::Connected { .. })).await;
    if let Event::Connected { attempt, .. } = event {
        assert_eq!(
            attempt.failures, 6,
            "the attempt that opened it came after six failures"
        );
    }
    client.send("back").await.unwrap();
    assert_eq!(recv_text(&mut served.ws).await, "back");
}

#[tokio::test]
async fn the_hook_runs_on_every_connection_before_queued_messages_which_go_out_once_in_order() {
    let mut server = TestServer::bind("127.0.0.1:0").await;
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&connections);
    let mut client = ReconnectingClient::builder(server.url())
        .config(config())
        // Long enough that sends right after `Reconnecting` find no connection.
        .reconnect(ReconnectConfig::default().first_delay(Duration::from_secs(1)))
        .on_connect(move |ws| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move { ws.send(format!("hook {n}")).await })
        })
        .start();
    // Not connected yet: queued.
    client.send("q1").await.unwrap();
    client.send("q2").await.unwrap();
    assert_eq!(client.sender().queued(), 2);
    let mut served = server.accept().await;
    for expected in ["hook 1", "q1", "q2"] {
        assert_eq!(recv_text(&mut served.ws).await, expected);
    }
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    assert_eq!(client.sender().queued(), 0);
    client.send("live 1").await.unwrap();
    assert_eq!(recv_text(&mut served.ws).await, "live 1");

    drop(served);
    until(&mut client, "Reconnecting", |e| {
        matches!(e, Event::Reconnecting { .. })
    })
    .await;
    let sender = client.sender();
    sender.send("q3").await.unwrap();
    client.send("q4").await.unwrap();
    assert_eq!(sender.queued(), 2);
    let mut served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    client.send("live 2").await.unwrap();
    // The hook's message, then the queue, then what was sent after: each once.
    for expected in ["hook 2", "q3", "q4", "live 2"] {
        assert_eq!(recv_text(&mut served.ws).await, expected);
    }
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_failing_hook_fails_the_attempt_which_is_retried() {
    let mut server = TestServer::bind("127.0.0.1:0").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let mut client = ReconnectingClient::builder(server.url())
        .config(config())
        .reconnect(quick())
        .on_connect(move |ws| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if n == 0 {
                    // As if the subscription was refused.
                    return Err(std::io::Error::other("subscription refused").into());
                }
                ws.send("subscribed").await
            })
        })
        .start();
    client.send("queued").await.unwrap();
    let _first = server.accept().await;
    match next(&mut client).await {
        Event::Disconnected(Disconnect::Failed { error, attempt }) => {
            assert_eq!(attempt.number, 1);
            assert!(error.to_string().contains("subscription refused"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(next(&mut client).await, Event::Reconnecting { .. }));
    let mut served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { attempt, .. } if attempt.number == 2));
    assert_eq!(recv_text(&mut served.ws).await, "subscribed");
    assert_eq!(recv_text(&mut served.ws).await, "queued");
}

#[tokio::test]
async fn the_offline_queue_is_bounded_and_refuse_refuses() {
    let nobody = format!("ws://127.0.0.1:{}/", free_port().await);
    let by_count = ReconnectingClient::builder(nobody.clone())
        .config(config())
        .reconnect(quick().offline(Offline::Queue {
            max_messages: 2,
            max_bytes: 1 << 20,
        }))
        .start();
    by_count.send("a").await.unwrap();
    by_count.send("b").await.unwrap();
    match by_count.send("c").await {
        Err(SendError::QueueFull(m)) => assert_eq!(m, Message::text("c")),
        other => panic!("{other:?}"),
    }
    assert_eq!(by_count.sender().queued(), 2);

    let by_size = ReconnectingClient::builder(nobody.clone())
        .config(config())
        .reconnect(quick().offline(Offline::Queue {
            max_messages: 100,
            max_bytes: 5,
        }))
        .start();
    by_size.send("abc").await.unwrap();
    let refused = by_size.send("def").await.unwrap_err();
    assert!(refused.to_string().contains("queue is full"), "{refused}");
    assert_eq!(refused.into_message(), Message::text("def"));
    by_size.send("de").await.unwrap();

    let refusing = ReconnectingClient::builder(nobody)
        .config(config())
        .reconnect(quick().offline(Offline::Refuse))
        .start();
    match refusing.send("x").await {
        Err(SendError::NotConnected(m)) => assert_eq!(m, Message::text("x")),
        other => panic!("{other:?}"),
    }
    assert_eq!(refusing.sender().queued(), 0);
}

#[tokio::test]
async fn a_close_with_4001_is_a_final_refusal() {
    let mut server = TestServer::bind("127.0.0.1:0").await;
    let mut client = ReconnectingClient::builder(server.url())
        .config(config())
        .reconnect(quick())
        .start();
    let mut served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    let frame = CloseFrame::new(CloseCode(4001), "unauthorized");
    served.ws.close(Some(frame)).await.unwrap();
    match next(&mut client).await {
        Event::Disconnected(Disconnect::Closed { frame: Some(f), .. }) => assert_eq!(f.code.0, 4001),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        next(&mut client).await,
        Event::GaveUp(GiveUp::FinalRefusal)
    ));
    ends(&mut client).await;
    assert!(server.conns.try_recv().is_err(), "no second attempt");
    assert!(matches!(client.send("late").await, Err(SendError::Closed(_))));
}

#[tokio::test]
async fn an_http_403_is_a_final_refusal_but_a_429_is_retried() {
    let mut server = TestServer::bind_refusing("127.0.0.1:0", Some(403)).await;
    let mut client = ReconnectingClient::builder(server.url())
        .config(config())
        .reconnect(quick())
        .start();
    match next(&mut client).await {
        Event::Disconnected(Disconnect::Failed { error, .. }) => {
            assert!(
                matches!(
                    error.handshake_error(),
                    Some(sockeye::HandshakeError::Rejected { status: 403, .. })
                ),
                "{error}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        next(&mut client).await,
        Event::GaveUp(GiveUp::FinalRefusal)
    ));
    ends(&mut client).await;
    assert!(server.conns.try_recv().is_err());

    let busy = TestServer::bind_refusing("127.0.0.1:0", Some(429)).await;
    let mut client = ReconnectingClient::builder(busy.url())
        .config(config())
        .reconnect(quick().max_attempts(2))
        .start();
    assert!(matches!(
        next(&mut client).await,
        Event::Disconnected(Disconnect::Failed { .. })
    ));
    assert!(matches!(next(&mut client).await, Event::Reconnecting { .. }));
    assert!(matches!(
        next(&mut client).await,
        Event::Disconnected(Disconnect::Failed { .. })
    ));
    assert!(matches!(
        next(&mut client).await,
        Event::GaveUp(GiveUp::MaxAttempts)
    ));
    ends(&mut client).await;
}

#[tokio::test]
async fn a_dead_peer_is_found_by_the_keepalive_and_the_client_reconnects() {
    let mut server = TestServer::bind("127.0.0.1:0").await;
    let config = Config::builder()
        .proxy(ProxyConfig::Direct)
        .keepalive(Some(Duration::from_millis(100)))
        // Generous for a loaded machine: the live peer below must never miss it.
        .keepalive_timeout(Duration::from_millis(1000))
        .close_timeout(Duration::from_millis(200))
        .build();
    let mut client = ReconnectingClient::builder(server.url())
        .config(config)
        .reconnect(quick())
        .start();
    // Accepted and never read again: pings go unanswered, the socket stays open.
    let dead = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    match next(&mut client).await {
        Event::Disconnected(Disconnect::Lost { error, .. }) => {
            assert_eq!(error.timeout(), Some(sockeye::TimeoutCause::Keepalive), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(next(&mut client).await, Event::Reconnecting { .. }));
    let mut alive = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    // A live peer answers the pings: the connection stays up over several keepalive periods.
    let echo = tokio::spawn(async move {
        while let Some(Ok(m)) = alive.ws.recv().await {
            if m.is_data() {
                alive.ws.send(m).await.unwrap();
            }
        }
    });
    for i in 0..4 {
        client.send(format!("ping {i}")).await.unwrap();
        // Keepalive pongs are delivered too (as by `WebSocket::recv`): skip them.
        let event = until(&mut client, "the echo", |e| {
            !matches!(e, Event::Message(Message::Pong(_)))
        })
        .await;
        assert!(
            matches!(&event, Event::Message(m) if *m == Message::text(format!("ping {i}"))),
            "{event:?}"
        );
        // Spans a few keepalive intervals (100 ms): pings go out and are answered.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    drop(dead);
    client.close(None);
    until(&mut client, "ClosedByUs", |e| {
        matches!(e, Event::Disconnected(Disconnect::ClosedByUs { .. }))
    })
    .await;
    ends(&mut client).await;
    echo.await.unwrap();
}

#[tokio::test]
async fn the_factory_fails_over_between_two_servers_one_of_them_down() {
    let mut up = TestServer::bind("127.0.0.1:0").await;
    let down = format!("ws://127.0.0.1:{}/", free_port().await);
    let nodes = [down, up.url()];
    let mut client = ReconnectingClient::with_factory(move |attempt| {
        let node = &nodes[(attempt.number as usize - 1) % nodes.len()];
        // Where to resume from, in each attempt's URL.
        sockeye::IntoClientRequest::into_client_request(format!("{node}?since={}", attempt.number))
    })
    .config(config())
    .reconnect(quick())
    .start();
    match next(&mut client).await {
        Event::Disconnected(Disconnect::Failed { attempt, .. }) => assert_eq!(attempt.number, 1),
        other => panic!("{other:?}"),
    }
    assert!(matches!(next(&mut client).await, Event::Reconnecting { attempt, .. } if attempt.number == 2));
    let served = up.accept().await;
    assert_eq!(served.uri.to_string(), "/?since=2");
    assert!(matches!(next(&mut client).await, Event::Connected { attempt, .. } if attempt.number == 2));

    // Lost again: attempt 3 goes to the dead node, attempt 4 back to the live one.
    drop(served);
    let event = until(&mut client, "Connected", |e| matches!(e, Event::Connected { .. })).await;
    assert!(matches!(event, Event::Connected { attempt, .. } if attempt.number == 4));
    assert_eq!(up.accept().await.uri.to_string(), "/?since=4");
}

#[tokio::test]
async fn pause_resume_and_close() {
    let mut server = TestServer::bind("127.0.0.1:0").await;
    let mut client = ReconnectingClient::builder(server.url())
        .config(config())
        .reconnect(quick())
        .start();
    let mut served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    served.ws.send("before pause").await.unwrap();
    client.pause(Some(CloseFrame::new(CloseCode::NORMAL, "bye")));
    // The server reads the close and answers it.
    let close = tokio::time::timeout(STEP, served.ws.recv()).await.unwrap();
    assert!(matches!(close, Some(Ok(Message::Close(Some(f)))) if f.code == CloseCode::NORMAL));
    assert!(matches!(next(&mut client).await, Event::Message(m) if m == Message::text("before pause")));
    match next(&mut client).await {
        Event::Disconnected(Disconnect::ClosedByUs {
            reply: Some(reply), ..
        }) => {
            assert_eq!(reply.code, CloseCode::NORMAL);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(next(&mut client).await, Event::Paused));
    // Paused: no reconnection, sends are queued.
    client.send("while paused").await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), server.accept())
            .await
            .is_err(),
        "paused, yet it reconnected"
    );
    client.resume();
    let mut served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    assert_eq!(recv_text(&mut served.ws).await, "while paused");

    client.close(Some(CloseFrame::new(CloseCode::NORMAL, "")));
    let server_side = tokio::spawn(async move { while let Some(Ok(_)) = served.ws.recv().await {} });
    assert!(matches!(
        next(&mut client).await,
        Event::Disconnected(Disconnect::ClosedByUs { reply: Some(_), .. })
    ));
    ends(&mut client).await;
    assert!(matches!(
        client.send("after close").await,
        Err(SendError::Closed(_))
    ));
    server_side.await.unwrap();
}

#[tokio::test]
async fn pausing_during_the_backoff_and_dropping_the_client_stop_everything() {
    let nobody = format!("ws://127.0.0.1:{}/", free_port().await);
    let mut client = ReconnectingClient::builder(nobody)
        .config(config())
        .reconnect(ReconnectConfig::default().first_delay(Duration::from_secs(60)))
        .start();
    assert!(matches!(
        next(&mut client).await,
        Event::Disconnected(Disconnect::Failed { .. })
    ));
    assert!(matches!(next(&mut client).await, Event::Reconnecting { .. }));
    // In a minute-long backoff: pause at once.
    client.pause(None);
    assert!(matches!(next(&mut client).await, Event::Paused));
    // Resume: a new attempt at once, not after the minute.
    client.resume();
    assert!(
        matches!(next(&mut client).await, Event::Disconnected(Disconnect::Failed { attempt, .. }) if attempt.number == 2)
    );

    // Dropping the client closes its connection with 1001 and ends the driver.
    let mut server = TestServer::bind("127.0.0.1:0").await;
    let mut client = ReconnectingClient::builder(server.url()).config(config()).start();
    let mut served = server.accept().await;
    assert!(matches!(next(&mut client).await, Event::Connected { .. }));
    let sender = client.sender();
    drop(client);
    let close = tokio::time::timeout(STEP, served.ws.recv()).await.unwrap();
    assert!(
        matches!(&close, Some(Ok(Message::Close(Some(f)))) if f.code == CloseCode::GOING_AWAY),
        "{close:?}"
    );
    assert!(
        tokio::time::timeout(STEP, served.ws.recv())
            .await
            .unwrap()
            .is_none()
    );
    // The driver is gone: its sender says so.
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        match sender.send("x").await {
            Err(SendError::Closed(_)) => break,
            _ if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            other => panic!("{other:?}"),
        }
    }
}
