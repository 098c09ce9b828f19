//! Reading an HTTP/1.1 head — a request or status line and its headers — off a stream: the
//! server's handshake, the client's, and a proxy's answer to `CONNECT` all do it the same way.

use bytes::BytesMut;
use sockeye_proto::HandshakeError;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{Error, TimeoutCause};

/// Why no head was read.
#[derive(Debug)]
pub(crate) enum HeadError<E> {
    /// The parser refused what was read.
    Parse(E),
    /// Still incomplete past the limit.
    TooLarge,
    /// The peer closed the connection before the end of the head.
    Eof,
    /// Reading failed.
    Io(std::io::Error),
}

impl HeadError<HandshakeError> {
    /// What a handshake head that could not be read means, the one map for client and server:
    /// `Ok` when the head was read and refused (the parser's error, or too large for `limit`: a
    /// server answers it with its status), `Err` when the connection ended or failed first
    /// (`peer`, "client" or "server", is who closed it).
    pub(crate) fn into_handshake_error(self, limit: usize, peer: &str) -> Result<HandshakeError, Error> {
        match self {
            HeadError::Parse(e) => Ok(e),
            HeadError::TooLarge => Ok(HandshakeError::HeadTooLarge { limit }),
            HeadError::Eof => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the {peer} closed the connection during the handshake"),
            )
            .into()),
            HeadError::Io(e) => Err(e.into()),
        }
    }
}

/// Reads from `stream` into `buf` — which may already hold the start of the head — until `parse`
/// finds a complete head, and returns what `parse` made of it with the bytes read past the head
/// (they belong to whatever follows it). `parse` sees everything buffered and returns `None` while
/// the head is incomplete, or the head's length with its result; an incomplete head longer than
/// `limit` is an error, so a peer that never ends its head costs at most `limit` bytes (plus one
/// read).
pub(crate) async fn read_head<'b, S, T, E>(
    stream: &mut S,
    buf: &'b mut BytesMut,
    limit: usize,
    mut parse: impl FnMut(&[u8]) -> Result<Option<(T, usize)>, E>,
) -> Result<(T, &'b [u8]), HeadError<E>>
where
    S: AsyncRead + Unpin,
{
    loop {
        if let Some((parsed, n)) = parse(buf).map_err(HeadError::Parse)? {
            return Ok((parsed, &buf[n..]));
        }
        if buf.len() > limit {
            return Err(HeadError::TooLarge);
        }
        match stream.read_buf(buf).await {
            Ok(0) => return Err(HeadError::Eof),
            Ok(_) => {}
            Err(e) => return Err(HeadError::Io(e)),
        }
    }
}

/// How far ahead "never" lies for a deadline: a configured limit no `Instant` can hold
/// (`Duration::MAX`) is set this far instead, as tokio does for its own timers (~30 years).
const NEVER: std::time::Duration = std::time::Duration::from_secs(86_400 * 365 * 30);

/// The instant `limit` from now, saturating at [`NEVER`]: `Instant + Duration` panics on
/// overflow, and any limit is a valid setting.
pub(crate) fn deadline_in(limit: std::time::Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(limit)
        .or_else(|| now.checked_add(NEVER))
        .unwrap_or(now)
}

/// The deadline helper the handshakes share.
pub(crate) fn with_deadline<T>(
    limit: std::time::Duration,
    what: TimeoutCause,
    fut: impl Future<Output = Result<T, Error>>,
) -> impl Future<Output = Result<T, Error>> {
    with_deadline_at(deadline_in(limit), what, fut)
}

/// [`with_deadline`] at an instant: the phases of one handshake (TLS, the HTTP/2 sniff, the
/// upgrade) share one deadline, so that together they take no longer than the configured limit.
///
/// A function returning the timeout itself, not an `async fn`: an `async fn` would hold `fut`
/// and, once polled, the timeout made of it side by side, so the whole handshake future (5 KiB
/// and more) was copied into itself at the first poll and took twice its size (callgrind,
/// server side: ~1,200 instructions per connection, most of them `memcpy`, through these
/// wrappers).
pub(crate) fn with_deadline_at<T>(
    deadline: tokio::time::Instant,
    what: TimeoutCause,
    fut: impl Future<Output = Result<T, Error>>,
) -> impl Future<Output = Result<T, Error>> {
    use futures_util::FutureExt as _;
    tokio::time::timeout_at(deadline, fut)
        .map(move |result| result.unwrap_or_else(|_| Err(Error::timed_out(what))))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A head ends at the first blank line.
    fn blank_line(buf: &[u8]) -> Result<Option<((), usize)>, ()> {
        Ok(buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| ((), i + 4)))
    }

    #[tokio::test]
    async fn returns_the_bytes_after_the_head_and_stops_at_the_limit_or_eof() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        tokio::io::AsyncWriteExt::write_all(&mut client, b"ead\r\n\r\nafter")
            .await
            .unwrap();
        let mut buf = BytesMut::from(&b"H"[..]);
        let ((), rest) = read_head(&mut server, &mut buf, 64, blank_line).await.unwrap();
        assert_eq!(rest, b"after");

        tokio::io::AsyncWriteExt::write_all(&mut client, &[b'x'; 100])
            .await
            .unwrap();
        let mut buf = BytesMut::new();
        let err = read_head(&mut server, &mut buf, 64, blank_line)
            .await
            .unwrap_err();
        assert!(matches!(err, HeadError::TooLarge), "{err:?}");

        drop(client);
        let mut buf = BytesMut::new();
        let err = read_head(&mut server, &mut buf, 64, blank_line)
            .await
            .unwrap_err();
        assert!(matches!(err, HeadError::Eof), "{err:?}");
    }
}
