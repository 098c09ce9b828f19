//! Streaming messages over loopback sockets: `recv_chunk` hands over pieces as they arrive,
//! `send_stream` / `send_reader` send fragments from a source, a streaming echo forwards each
//! piece as it comes (cut-through), and a failing source ends the connection cleanly.
#![allow(clippy::unwrap_used)]

mod pattern;

use std::time::Duration;

use futures_util::stream;
use pattern::{Pattern, PatternCheck, streaming_echo};
use sockeye::{Bytes, CloseCode, Config, DataKind, Error, ErrorKind, Incoming, Message, Server};

fn big_config() -> Config {
    Config::builder().max_message_size(64 << 20).build()
}

#[tokio::test]
async fn a_reader_streamed_through_a_cut_through_echo_arrives_intact() {
    let addr = streaming_echo(big_config()).await;
    let (ws, _) = sockeye::connect_with(format!("ws://{addr}/").as_str(), &big_config())
        .await
        .unwrap();
    let (mut writer, mut reader) = ws.split();
    const LEN: u64 = 24 << 20;
    let send = tokio::spawn(async move {
        writer
            .send_reader(DataKind::Binary, Pattern::new(LEN))
            .await
            .unwrap();
        writer
    });
    let mut check = PatternCheck::default();
    let mut pieces = 0;
    loop {
        match reader.recv_chunk().await.unwrap().unwrap() {
            Incoming::Chunk(piece) => {
                assert_eq!(piece.kind, DataKind::Binary);
                assert_eq!(piece.first, pieces == 0);
                check.feed(&piece.data);
                pieces += 1;
                if piece.last {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(check.len(), LEN);
    assert!(pieces > 24, "{pieces} pieces: the message came whole");
    // The whole-message API reads a streamed message like any other.
    let mut writer = send.await.unwrap();
    let text: Vec<Bytes> = ["streamed ", "text ✓"].map(Bytes::from).to_vec();
    writer
        .send_stream(DataKind::Text, stream::iter(text.into_iter().map(Ok::<_, Error>)))
        .await
        .unwrap();
    assert_eq!(
        reader.recv().await.unwrap().unwrap(),
        Message::text("streamed text ✓")
    );
    let mut ws = reader.reunite(writer).unwrap();
    ws.close(None).await.unwrap();
}

/// A compressed message (the client compresses, permessage-deflate at its defaults) arrives at a
/// streaming server inflated, in pieces.
#[tokio::test]
async fn compressed_messages_stream_inflated() {
    let server = Server::bind("127.0.0.1:0", big_config()).await.unwrap();
    let addr = server.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(server.serve(move |mut ws, _| {
        let tx = tx.clone();
        async move {
            assert!(ws.connection().is_deflate_enabled());
            let mut text = Vec::new();
            let mut pieces = 0;
            while let Some(Ok(incoming)) = ws.recv_chunk().await {
                if let Incoming::Chunk(piece) = incoming {
                    assert!(piece.data.len() <= 64 << 10);
                    text.extend_from_slice(&piece.data);
                    pieces += 1;
                    if piece.last {
                        break;
                    }
                }
            }
            let _ = tx.send((text, pieces));
        }
    }));
    let (mut ws, _) = sockeye::connect_with(format!("ws://{addr}/").as_str(), &big_config())
        .await
        .unwrap();
    let json = "{\"id\":12345,\"name\":\"sockeye\",\"tags\":[\"a\",\"b\"]},".repeat(100_000);
    ws.send(Message::text(json.clone())).await.unwrap();
    let (text, pieces) = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(text.len(), json.len());
    assert!(text == json.as_bytes());
    assert!(pieces >= json.len() / (64 << 10), "{pieces} pieces");
}

/// A source that fails before anything was sent leaves the connection usable; one that fails
/// in the middle of its message closes the connection with 1011 (a message cannot be
/// abandoned), and the peer learns it.
#[tokio::test]
async fn a_failing_source_is_reported_and_never_leaves_half_a_message() {
    let server = Server::bind("127.0.0.1:0", Config::default()).await.unwrap();
    let addr = server.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(server.serve(move |mut ws, _| {
        let tx = tx.clone();
        async move {
            while let Some(item) = ws.recv().await {
                let _ = tx.send(item.map_err(|e| e.to_string()));
            }
        }
    }));
    let (mut ws, _) = sockeye::connect(format!("ws://{addr}/").as_str()).await.unwrap();
    let failing_at_once = stream::iter([Err::<Bytes, _>(std::io::Error::other("disk gone"))]);
    let e = ws
        .send_stream(DataKind::Binary, failing_at_once)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Source);
    assert!(e.to_string().contains("disk gone"), "{e}");
    // Invalid text is refused before it is sent.
    let bad_text = stream::iter([Ok::<_, Error>(Bytes::from_static(b"\xff"))]);
    let e = ws.send_stream(DataKind::Text, bad_text).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    ws.send("still open").await.unwrap();
    assert_eq!(rx.recv().await.unwrap().unwrap(), Message::text("still open"));

    // Fails after two chunks went out: the server sees the connection closed with 1011.
    let (slow_tx, slow_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let source = tokio_stream_from(slow_rx);
    let feeder = tokio::spawn(async move {
        slow_tx.send(Ok(Bytes::from_static(b"part one"))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        slow_tx.send(Ok(Bytes::from_static(b"part two"))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        slow_tx
            .send(Err(std::io::Error::other("upstream reset")))
            .await
            .unwrap();
    });
    let e = ws.send_stream(DataKind::Binary, source).await.unwrap_err();
    feeder.await.unwrap();
    assert_eq!(e.kind(), ErrorKind::Source);
    // The unfinished message is never delivered: the close comes first.
    let close = match rx.recv().await.unwrap() {
        Ok(Message::Close(frame)) => frame,
        other => panic!("the server got {other:?}"),
    };
    assert_eq!(close.unwrap().code, CloseCode::INTERNAL_ERROR);
}

/// A message begun with `recv_chunk` must be finished with it: `recv` says so instead of
/// hanging, and the rest is still there.
#[tokio::test]
async fn recv_refuses_a_message_being_streamed() {
    let addr = streaming_echo(Config::default()).await;
    let (mut ws, _) = sockeye::connect(format!("ws://{addr}/").as_str()).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Error>>(4);
    tx.send(Ok(Bytes::from_static(b"first"))).await.unwrap();
    // The first piece goes out while the source waits; the echo returns it at once.
    let sending = tokio::spawn(async move {
        let (mut ws2, _) = (ws, ());
        ws2.send_stream(DataKind::Binary, tokio_stream_from(rx))
            .await
            .unwrap();
        ws2
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    tx.send(Ok(Bytes::from_static(b"second"))).await.unwrap();
    drop(tx);
    ws = sending.await.unwrap();
    let Incoming::Chunk(first) = ws.recv_chunk().await.unwrap().unwrap() else {
        panic!()
    };
    assert!(first.first && !first.last);
    let e = ws.recv().await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let mut rest = Vec::new();
    loop {
        let Incoming::Chunk(piece) = ws.recv_chunk().await.unwrap().unwrap() else {
            panic!()
        };
        rest.extend_from_slice(&piece.data);
        if piece.last {
            break;
        }
    }
    assert_eq!([&first.data[..], &rest[..]].concat(), b"firstsecond");
}

/// Counts the bytes written through it: what went on the wire.
struct CountingWrites<S> {
    inner: S,
    written: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CountingWrites<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for CountingWrites<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = polled {
            self.written.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// With permessage-deflate on, a streamed message is compressed as it goes: each chunk is sent
/// (sync-flushed) before the source has the next, and the message ends with an empty frame after
/// the source's last wait. The peer inflates it in pieces as they come and whole, with context
/// takeover carrying on into the next message; far fewer bytes crossed the wire than were sent.
#[cfg(feature = "deflate")]
#[tokio::test]
async fn streamed_messages_are_compressed_as_they_go() {
    let server = Server::bind("127.0.0.1:0", big_config()).await.unwrap();
    let addr = server.local_addr().unwrap();
    let (got_tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(server.serve(move |mut ws, _| {
        let got_tx = got_tx.clone();
        async move {
            let mut first = Vec::new();
            while let Some(Ok(incoming)) = ws.recv_chunk().await {
                if let Incoming::Chunk(piece) = incoming {
                    first.extend_from_slice(&piece.data);
                    // Cut-through: each piece arrives while the source is still waiting.
                    let _ = got_tx.send(Some(piece.data.len()));
                    if piece.last {
                        break;
                    }
                }
            }
            let _ = got_tx.send(None);
            let Some(Ok(Message::Text(second))) = ws.recv().await else {
                return;
            };
            let _ = ws
                .send(Message::text(format!("{}:{}", first.len(), second.len())))
                .await;
            let _ = ws.send(Message::binary(first)).await;
            let _ = ws.send(Message::text(second)).await;
        }
    }));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = CountingWrites {
        inner: tcp,
        written: written.clone(),
    };
    let (ws, _) = sockeye::client_handshake(counted, format!("ws://{addr}/").as_str(), &big_config())
        .await
        .unwrap();
    assert!(ws.connection().is_deflate_enabled());
    let (mut writer, mut reader) = ws.split();
    let before = written.load(std::sync::atomic::Ordering::Relaxed);
    let row = "{\"id\":12345,\"name\":\"sockeye\",\"tags\":[\"a\",\"b\"]},";
    let chunk = Bytes::from(row.repeat(2_000));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Error>>(1);
    let send = tokio::spawn(async move {
        writer
            .send_stream(DataKind::Text, tokio_stream_from(rx))
            .await
            .unwrap();
        writer
    });
    let mut arrived = 0;
    for _ in 0..10 {
        tx.send(Ok(chunk.clone())).await.unwrap();
        // The source waits here until the server saw this chunk: nothing held back for FIN.
        loop {
            let Some(len) = tokio::time::timeout(Duration::from_secs(10), got.recv())
                .await
                .unwrap()
                .unwrap()
            else {
                panic!("the message ended early");
            };
            arrived += len;
            if arrived % chunk.len() == 0 && arrived > 0 {
                break;
            }
        }
    }
    drop(tx);
    let mut writer = send.await.unwrap();
    // The last frame is empty (the source ended after a wait), then the message is over.
    while let Some(len) = got.recv().await.unwrap() {
        arrived += len;
    }
    assert_eq!(arrived, chunk.len() * 10);
    let on_wire = written.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(
        on_wire * 10 < arrived,
        "{on_wire} bytes on the wire for {arrived} bytes of text: not compressed"
    );
    // The next message continues the compression context (takeover on by default).
    writer.send(Message::text(row.repeat(3))).await.unwrap();
    let sizes = format!("{}:{}", chunk.len() * 10, row.len() * 3);
    assert_eq!(reader.recv().await.unwrap().unwrap(), Message::text(sizes));
    let Message::Binary(first) = reader.recv().await.unwrap().unwrap() else {
        panic!()
    };
    assert!(first == row.repeat(20_000).as_bytes());
    assert_eq!(
        reader.recv().await.unwrap().unwrap(),
        Message::text(row.repeat(3))
    );
}

/// A `Stream` over an mpsc receiver (no tokio-stream dependency for one adapter).
fn tokio_stream_from<T>(rx: tokio::sync::mpsc::Receiver<T>) -> impl futures_util::Stream<Item = T> {
    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}
