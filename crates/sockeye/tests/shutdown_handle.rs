//! `ShutdownHandle::new` and `WebSocket::close_on_shutdown`: a connection served by another
//! server (here: one made from a stream directly, as an `Upgrade` makes it) closes with 1001
//! when its handle shuts down, whether it is waiting for input or shut down before.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use sockeye::{CloseCode, Config, Message, Role, ShutdownHandle, WebSocket};

fn pair() -> (
    WebSocket<tokio::io::DuplexStream>,
    WebSocket<tokio::io::DuplexStream>,
) {
    let (a, b) = tokio::io::duplex(64 << 10);
    (
        WebSocket::from_upgraded(a, Role::Server, &Config::default(), &[], None),
        WebSocket::from_upgraded(b, Role::Client, &Config::default(), &[], None),
    )
}

async fn close_code(client: &mut WebSocket<tokio::io::DuplexStream>) -> Option<CloseCode> {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), client.recv())
            .await
            .unwrap()
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => {}
            _ => return None,
        }
    }
}

#[tokio::test]
async fn a_waiting_connection_closes_with_1001_on_shutdown() {
    let (mut server, mut client) = pair();
    let shutdown = ShutdownHandle::new();
    server.close_on_shutdown(&shutdown);
    let serving = tokio::spawn(async move { while let Some(Ok(_)) = server.recv().await {} });
    client.send(Message::text("hello")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!shutdown.is_shutting_down());
    shutdown.shutdown();
    assert!(shutdown.is_shutting_down());
    assert_eq!(close_code(&mut client).await, Some(CloseCode::GOING_AWAY));
    tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_connection_tied_after_the_shutdown_began_closes_at_once() {
    let (mut server, mut client) = pair();
    let shutdown = ShutdownHandle::default();
    shutdown.shutdown();
    server.close_on_shutdown(&shutdown);
    assert!(
        server.send(Message::text("late")).await.is_err(),
        "sends fail once it is going away"
    );
    tokio::spawn(async move { while let Some(Ok(_)) = server.recv().await {} });
    assert_eq!(close_code(&mut client).await, Some(CloseCode::GOING_AWAY));
}

#[tokio::test]
async fn an_untied_connection_is_not_closed() {
    let (mut server, mut client) = pair();
    let shutdown = ShutdownHandle::new();
    shutdown.shutdown();
    server.send(Message::text("still here")).await.unwrap();
    assert_eq!(client.recv().await.unwrap().unwrap(), Message::text("still here"));
}
