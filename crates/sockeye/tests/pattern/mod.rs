//! What the streaming tests share: a byte stream of any length whose every byte depends on its
//! position, produced and checked without holding it (byte `i` is byte `i % 8` of the
//! little-endian `u64` `i / 8`: a lost, repeated or reordered piece shows at its first byte), and
//! a server that echoes in pieces.
#![allow(dead_code)]

use std::pin::Pin;
use std::task::{Context, Poll};

use sockeye::{Config, Incoming, Server};
use tokio::io::{AsyncRead, ReadBuf};

/// A server that echoes every message in pieces, forwarding each as it arrives (cut-through).
pub(crate) async fn streaming_echo(config: Config) -> std::net::SocketAddr {
    let server = Server::bind("127.0.0.1:0", config).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(|mut ws, _| async move {
        while let Some(Ok(incoming)) = ws.recv_chunk().await {
            if let Incoming::Chunk(piece) = incoming
                && ws
                    .send_fragment(piece.kind, piece.data, piece.last)
                    .await
                    .is_err()
            {
                break;
            }
        }
    }));
    addr
}

fn byte_at(i: u64) -> u8 {
    (i / 8).to_le_bytes()[(i % 8) as usize]
}

/// Fills `out` with the pattern from position `at`, a word at a time where aligned.
fn fill(out: &mut [u8], mut at: u64) {
    let mut i = 0;
    while i < out.len() && !at.is_multiple_of(8) {
        out[i] = byte_at(at);
        i += 1;
        at += 1;
    }
    let words = (out.len() - i) / 8;
    for chunk in out[i..i + words * 8].chunks_exact_mut(8) {
        chunk.copy_from_slice(&(at / 8).to_le_bytes());
        at += 8;
    }
    for byte in &mut out[i + words * 8..] {
        *byte = byte_at(at);
        at += 1;
    }
}

/// An `AsyncRead` of `len` bytes of the pattern.
pub(crate) struct Pattern {
    at: u64,
    len: u64,
}

impl Pattern {
    pub(crate) fn new(len: u64) -> Self {
        Pattern { at: 0, len }
    }
}

impl AsyncRead for Pattern {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let n = (buf.remaining() as u64).min(this.len - this.at) as usize;
        let out = buf.initialize_unfilled_to(n);
        fill(out, this.at);
        buf.advance(n);
        this.at += n as u64;
        Poll::Ready(Ok(()))
    }
}

/// Checks that pieces fed in order are the pattern.
#[derive(Default)]
pub(crate) struct PatternCheck {
    at: u64,
    scratch: Vec<u8>,
}

impl PatternCheck {
    pub(crate) fn feed(&mut self, piece: &[u8]) {
        self.scratch.resize(piece.len(), 0);
        fill(&mut self.scratch, self.at);
        if self.scratch != piece {
            let bad = piece
                .iter()
                .zip(&self.scratch)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            panic!("the stream differs at byte {}", self.at + bad as u64);
        }
        self.at += piece.len() as u64;
    }

    pub(crate) fn len(&self) -> u64 {
        self.at
    }
}
