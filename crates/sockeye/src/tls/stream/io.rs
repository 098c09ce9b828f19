//! Plaintext in and out of a handshaken stream: `AsyncRead` (records decrypted straight into the
//! reader's buffer), `AsyncWrite` (data encrypted into the send queue, small pieces gathered
//! into one record), and the clean end (close_notify, RFC 8446 §6.1).

use std::io;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::buffers::{MAX_ENCRYPT, SEND_BACKLOG};
use super::connection::{Driven, TlsStream, Want};
use super::side::TlsSide;

/// The error of a read or write before the handshake's end.
fn not_handshaken() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "TLS: read or write before the handshake finished (await `handshake()` first)",
    )
}

/// The error of a write after our close_notify.
fn shut_for_writing() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the TLS connection was shut down for writing (close_notify sent)",
    )
}

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> TlsStream<S, C> {
    /// Encrypts (some of) `data` into the send queue; `Pending` while the queue is full and
    /// the socket takes nothing.
    fn poll_encrypt(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(e) = self.error() {
            return Poll::Ready(Err(e));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if self.conn.is_handshaking() {
            return Poll::Ready(Err(not_handshaken()));
        }
        if self.close_notify_queued {
            return Poll::Ready(Err(shut_for_writing()));
        }
        if self.out_end - self.out_start >= SEND_BACKLOG {
            ready!(self.poll_send_for_writer(cx))?;
        }
        let n = match self.drive(Want::Encrypt(data)) {
            Ok(Driven::Encrypted(n)) => n,
            Ok(Driven::Closed) => return Poll::Ready(Err(shut_for_writing())),
            Ok(_) => return Poll::Ready(Err(not_handshaken())),
            Err(e) => {
                let _ = self.poll_send_queued(cx);
                return Poll::Ready(Err(e));
            }
        };
        // Out now if the socket takes it; else the next write or flush waits for it.
        if let Poll::Ready(Err(e)) = self.poll_send_queued(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> AsyncRead for TlsStream<S, C> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.plain_start < this.plain.len() {
                let n = buf.remaining().min(this.plain.len() - this.plain_start);
                buf.put_slice(&this.plain[this.plain_start..this.plain_start + n]);
                this.plain_start += n;
                if this.plain_start == this.plain.len() {
                    this.plain = Vec::new();
                    this.plain_start = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.peer_closed {
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = this.error() {
                return Poll::Ready(Err(e));
            }
            if this.conn.is_handshaking() {
                return Poll::Ready(Err(not_handshaken()));
            }
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let before = buf.filled().len();
            let driven = if this.needs_input {
                Ok(Driven::NeedInput)
            } else {
                this.drive(Want::Read(buf))
            };
            // What rustls queues as it reads (a session ticket, a key update) goes out with the
            // next write or flush, as with rustls's own streams: a read that wrote would take
            // the socket's write wake-up from a writer waiting in another task. Only the alert
            // that ends a failed connection is tried at once, and the writer it may have taken
            // the wake-up from is woken: its next call returns the same error.
            match driven {
                Ok(Driven::Delivered) if buf.filled().len() > before => {
                    this.release_idle_incoming();
                    return Poll::Ready(Ok(()));
                }
                // Into `plain` only (behind 0-RTT data): taken from there at the top.
                Ok(Driven::Delivered) => continue,
                Ok(Driven::Closed) => return Poll::Ready(Ok(())),
                Ok(Driven::NeedInput | Driven::Encrypted(_)) => {}
                Err(e) => {
                    let _ = this.poll_send_queued(cx);
                    if let Some(writer) = this.waiting_writer.take() {
                        writer.wake();
                    }
                    return Poll::Ready(Err(e));
                }
            }
            if this.io_eof {
                return Poll::Ready(this.at_eof());
            }
            if ready!(this.poll_fill(cx))? == 0 {
                return Poll::Ready(this.at_eof());
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> AsyncWrite for TlsStream<S, C> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_encrypt(cx, buf)
    }

    /// Several pieces (a frame's header and its payload) go into the same records: the small
    /// ones are gathered first (a record per piece would add 22 bytes and a seal to each).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut pieces = bufs.iter().filter(|b| !b.is_empty());
        let Some(first) = pieces.next() else {
            return Poll::Ready(Ok(0));
        };
        if first.len() >= MAX_ENCRYPT || bufs.iter().filter(|b| !b.is_empty()).count() == 1 {
            return self.poll_encrypt(cx, first);
        }
        let mut gathered = Vec::with_capacity(MAX_ENCRYPT.min(bufs.iter().map(|b| b.len()).sum()));
        for piece in bufs {
            let n = piece.len().min(MAX_ENCRYPT - gathered.len());
            gathered.extend_from_slice(&piece[..n]);
            if gathered.len() == MAX_ENCRYPT {
                break;
            }
        }
        self.poll_encrypt(cx, &gathered)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send_for_writer(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Not after a failure or before the handshake's end: there is no session to close.
        if !self.close_notify_queued && self.failed.is_none() && !self.conn.is_handshaking() {
            self.close_notify_queued = matches!(self.drive(Want::CloseNotify), Ok(Driven::Encrypted(_)));
        }
        ready!(self.poll_send_for_writer(cx))?;
        match ready!(Pin::new(&mut self.io).poll_shutdown(cx)) {
            // Not connected any more: shut down already.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            other => Poll::Ready(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use rustls::{ClientConfig, RootCertStore, ServerConfig};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

    use crate::tls::stream::connection::{ClientTlsStream, ServerTlsStream};

    /// A client and a server config for "localhost" (a certificate with `extra_names` more
    /// names: hundreds make a Certificate message of several records, joined by rustls in our
    /// buffer), with the server's resolver wrapped as a `Server` wraps it.
    fn configs(extra_names: usize) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
        configs_with(extra_names, None)
    }

    /// [`configs`], the server accepting only `server_group` for the key exchange when given:
    /// one the client does not guess first makes the server ask again (HelloRetryRequest).
    fn configs_with(
        extra_names: usize,
        server_group: Option<&'static dyn rustls::crypto::SupportedKxGroup>,
    ) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
        let names: Vec<String> = std::iter::once("localhost".to_string())
            .chain((0..extra_names).map(|i| format!("name-{i}.example.com")))
            .collect();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut server_provider = (*provider).clone();
        if let Some(group) = server_group {
            server_provider.kx_groups = vec![group];
        }
        let mut server = ServerConfig::builder_with_provider(Arc::new(server_provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap();
        server.cert_resolver = Arc::new(crate::tls::stream::sni::NoteSni(server.cert_resolver.clone()));
        (Arc::new(client), Arc::new(server))
    }

    fn localhost() -> ServerName<'static> {
        ServerName::try_from("localhost").unwrap()
    }

    /// A handshaken pair over an in-memory pipe that holds at most `chunk` bytes each way, so
    /// that every read and write is cut at arbitrary points of the records.
    async fn pair(
        chunk: usize,
        extra_names: usize,
    ) -> (ClientTlsStream<DuplexStream>, ServerTlsStream<DuplexStream>) {
        let (client_config, server_config) = configs(extra_names);
        let (a, b) = duplex(chunk);
        let mut client = ClientTlsStream::client(a, client_config, localhost()).unwrap();
        let mut server = ServerTlsStream::server(b, server_config).unwrap();
        let (c, s) = tokio::join!(client.handshake(), server.handshake());
        c.unwrap();
        s.unwrap();
        (client, server)
    }

    /// Deterministic bytes, different for each message.
    fn message(seed: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(7919)) as u8)
            .collect()
    }

    /// Sends the messages and reads their echo at the same time (a client that only wrote would
    /// stall a server whose echo fills the pipe), the server echoing concurrently. The client's
    /// halves share the stream: a write drives rustls over records its reads have not taken.
    async fn echo_all(
        client: &mut ClientTlsStream<DuplexStream>,
        server: &mut ServerTlsStream<DuplexStream>,
        sizes: &[usize],
    ) {
        let total: usize = sizes.iter().sum();
        let echo = async {
            let mut buf = vec![0u8; 3000];
            let mut echoed = 0;
            while echoed < total {
                let n = server.read(&mut buf).await.unwrap();
                assert_ne!(n, 0, "the server saw the end after {echoed} of {total} bytes");
                server.write_all(&buf[..n]).await.unwrap();
                server.flush().await.unwrap();
                echoed += n;
            }
        };
        let (mut reader, mut writer) = tokio::io::split(client);
        let send = async {
            for (i, &len) in sizes.iter().enumerate() {
                writer.write_all(&message(i, len)).await.unwrap();
                writer.flush().await.unwrap();
            }
        };
        let receive = async {
            for (i, &len) in sizes.iter().enumerate() {
                let mut back = vec![0u8; len];
                reader.read_exact(&mut back).await.unwrap();
                assert!(
                    back == message(i, len),
                    "message {i} ({len} bytes) came back different"
                );
            }
        };
        tokio::join!(echo, send, receive);
    }

    #[tokio::test]
    async fn data_survives_every_cut_of_the_records() {
        for (chunk, extra_names, sizes) in [
            (1, 0, &[0, 1, 2, 100, 700][..]),
            (5, 1_500, &[1, 300, 2_000][..]),
            (17, 0, &[16_383, 16_384, 16_385][..]),
            (100, 1_500, &[5, 20_000][..]),
            (1_000, 0, &[1, 40_000, 3][..]),
            (4_096, 1_500, &[65_536, 100_000][..]),
            (16_389, 0, &[16_384, 200_000, 7][..]),
            (65_536, 1_500, &[1, 300_000][..]),
        ] {
            let (mut client, mut server) = pair(chunk, extra_names).await;
            assert_eq!(server.sni_hostname(), Some("localhost"), "chunk {chunk}");
            echo_all(&mut client, &mut server, sizes).await;
            // A clean close each way: close_notify, then the end of reading (together: the pipe
            // may hold less than the alert's record).
            let mut rest = Vec::new();
            let (closed, read) = tokio::join!(client.shutdown(), server.read_to_end(&mut rest));
            closed.unwrap();
            assert_eq!(read.unwrap(), 0, "chunk {chunk}");
            let late = client.write(b"after the close").await.unwrap_err();
            assert_eq!(late.kind(), std::io::ErrorKind::BrokenPipe, "{late}");
            let (closed, read) = tokio::join!(server.shutdown(), client.read_to_end(&mut rest));
            closed.unwrap();
            assert_eq!(read.unwrap(), 0, "chunk {chunk}");
        }
    }

    #[tokio::test]
    async fn an_end_without_close_notify_is_an_error() {
        let (mut client, mut server) = pair(4096, 0).await;
        echo_all(&mut client, &mut server, &[10]).await;
        // The TCP-level end only: a truncation attack looks the same (RFC 8446 §6.1).
        client.get_mut().shutdown().await.unwrap();
        let err = server.read(&mut [0u8; 10]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
        assert!(err.to_string().contains("close_notify"), "{err}");
    }

    /// A reader and a writer in two tasks (`tokio::io::split`), the writer waiting for a full
    /// socket; a bad record fails the read, whose alert finds the socket full too. The writer
    /// must still hear of it: before, the alert's attempt left the reader's waker in the
    /// socket's one write slot and the writer slept forever once the socket drained.
    #[tokio::test]
    async fn a_failed_read_does_not_steal_a_waiting_writers_wake_up() {
        let (mut client, server) = pair(1024, 0).await;
        let (mut reader, mut writer) = tokio::io::split(server);
        let writing = tokio::spawn(async move {
            let block = [7u8; 4096];
            for _ in 0..10_000 {
                writer.write_all(&block).await?;
            }
            Ok::<(), std::io::Error>(())
        });
        // The client reads nothing: the writer fills the pipe and waits.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!writing.is_finished());
        // An application-data record that cannot decrypt (RFC 8446 §5.2: bad_record_mac).
        let mut record = vec![23, 3, 3, 0, 32];
        record.extend_from_slice(&[0x5a; 32]);
        client.get_mut().write_all(&record).await.unwrap();
        let err = reader.read(&mut [0u8; 64]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        // The peer drains the socket, as a live peer would.
        let drain = tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok(Ok(n)) = tokio::time::timeout(
                std::time::Duration::from_millis(500),
                client.get_mut().read(&mut buf),
            )
            .await
            {
                if n == 0 {
                    break;
                }
            }
        });
        let written = tokio::time::timeout(std::time::Duration::from_secs(5), writing)
            .await
            .expect("the writer was never woken after the read failed")
            .unwrap();
        let late = written.unwrap_err();
        assert_eq!(late.to_string(), err.to_string());
        drain.await.unwrap();
    }

    #[tokio::test]
    async fn bad_bytes_fail_the_handshake_and_the_peer_gets_an_alert() {
        let (_, server_config) = configs(0);
        let (mut raw, b) = duplex(4096);
        let mut server = ServerTlsStream::server(b, server_config).unwrap();
        raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let err = server.handshake().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        assert!(
            err.get_ref().unwrap().downcast_ref::<rustls::Error>().is_some(),
            "{err:?}"
        );
        let mut alert = [0u8; 7];
        raw.read_exact(&mut alert).await.unwrap();
        assert_eq!(alert[0], 21, "an alert record (RFC 8446 §6): {alert:?}");
        // Every later call reports the same failure.
        let again = server.read(&mut [0u8; 4]).await.unwrap_err();
        assert_eq!(again.to_string(), err.to_string());
    }

    #[tokio::test]
    async fn an_idle_stream_gives_its_buffers_back() {
        let (mut client, mut server) = pair(65_536, 0).await;
        echo_all(&mut client, &mut server, &[100, 50_000]).await;
        // A read that took every byte there was gives the buffer back at once: a connection
        // that stops reading (a sender) holds none.
        assert_eq!(client.incoming.capacity(), 0);
        // The server waits for more: nothing partial, so no buffer of ours is held.
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(20), server.read(&mut [0u8; 64])).await;
        assert!(waited.is_err(), "nothing was sent");
        assert_eq!(
            (
                server.incoming.capacity(),
                server.outgoing.capacity(),
                server.plain.capacity()
            ),
            (0, 0, 0)
        );
        // And takes one again when bytes arrive.
        echo_all(&mut client, &mut server, &[3]).await;
    }

    /// rustls's buffered connection (through tokio-rustls) on the other end, which asks for new
    /// keys both ways in the middle of the traffic (TLS 1.3 KeyUpdate, RFC 8446 §4.6.3): our
    /// side must take the new keys and answer with its own.
    #[tokio::test]
    async fn key_updates_from_a_buffered_peer_are_followed() {
        let (client_config, server_config) = configs(0);
        let (a, b) = duplex(8192);
        let connector = tokio_rustls::TlsConnector::from(client_config);
        let mut server = ServerTlsStream::server(b, server_config).unwrap();
        let (client, s) = tokio::join!(connector.connect(localhost(), a), server.handshake());
        let mut client = client.unwrap();
        s.unwrap();
        let echo = async {
            let mut buf = vec![0u8; 5000];
            loop {
                let n = server.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                server.write_all(&buf[..n]).await.unwrap();
                server.flush().await.unwrap();
            }
            server.shutdown().await.unwrap();
        };
        let talk = async {
            for i in 0..6 {
                if i % 2 == 1 {
                    client.get_mut().1.refresh_traffic_keys().unwrap();
                }
                let (mut reader, mut writer) = tokio::io::split(client);
                let send = async {
                    writer.write_all(&message(i, 30_000)).await.unwrap();
                    writer.flush().await.unwrap();
                };
                let receive = async {
                    let mut back = vec![0u8; 30_000];
                    reader.read_exact(&mut back).await.unwrap();
                    assert!(back == message(i, 30_000), "message {i}");
                };
                tokio::join!(send, receive);
                client = reader.unsplit(writer);
            }
            client.shutdown().await.unwrap();
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
        };
        tokio::join!(echo, talk);
    }

    /// A reader in one task and a writer in another (`tokio::io::split`): a read must not take
    /// the socket's write wake-up from the writer (tokio keeps one waker per direction), or the
    /// writer, waiting for room, is never woken. Here the server reads everything before it
    /// answers, so the client's reader waits all along while its writer fills the pipe.
    #[tokio::test]
    async fn a_reader_does_not_take_the_writers_wake_up() {
        let (client, mut server) = pair(64, 0).await;
        let (mut reader, mut writer) = tokio::io::split(client);
        const TOTAL: usize = 200_000;
        let write = tokio::spawn(async move {
            writer.write_all(&message(1, TOTAL)).await.unwrap();
            writer.flush().await.unwrap();
            writer
        });
        let read = tokio::spawn(async move {
            let mut answer = [0u8; 4];
            reader.read_exact(&mut answer).await.unwrap();
            assert_eq!(&answer, b"done");
        });
        let serve = tokio::spawn(async move {
            let mut got = vec![0u8; TOTAL];
            server.read_exact(&mut got).await.unwrap();
            assert!(got == message(1, TOTAL));
            server.write_all(b"done").await.unwrap();
            server.flush().await.unwrap();
            server
        });
        let all = async {
            let _writer = write.await.unwrap();
            read.await.unwrap();
            let _server = serve.await.unwrap();
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), all)
            .await
            .expect("the writer was never woken");
    }

    /// A HelloRetryRequest makes rustls ask the certificate resolver twice: the second name
    /// must not be left for the next connection on the thread, which sent none.
    #[tokio::test]
    async fn the_sni_host_name_is_each_connections_own() {
        let group = rustls::crypto::aws_lc_rs::kx_group::SECP384R1;
        let (client_config, server_config) = configs_with(0, Some(group));
        let (a, b) = duplex(65_536);
        let mut client = ClientTlsStream::client(a, client_config.clone(), localhost()).unwrap();
        let mut server = ServerTlsStream::server(b, server_config.clone()).unwrap();
        let (c, s) = tokio::join!(client.handshake(), server.handshake());
        c.unwrap();
        s.unwrap();
        assert_eq!(server.sni_hostname(), Some("localhost"));
        assert_eq!(
            server.tls_state().handshake_kind(),
            Some(rustls::HandshakeKind::FullWithHelloRetryRequest)
        );
        // The next client sends no SNI.
        let mut no_sni = (*client_config).clone();
        no_sni.enable_sni = false;
        let (a, b) = duplex(65_536);
        let mut client = ClientTlsStream::client(a, Arc::new(no_sni), localhost()).unwrap();
        let mut server = ServerTlsStream::server(b, server_config).unwrap();
        let (c, s) = tokio::join!(client.handshake(), server.handshake());
        c.unwrap();
        s.unwrap();
        assert_eq!(server.sni_hostname(), None);
    }

    #[tokio::test]
    async fn reading_or_writing_before_the_handshake_says_what_to_do() {
        let (client_config, _) = configs(0);
        let (a, _b) = duplex(4096);
        let mut client = ClientTlsStream::client(a, client_config, localhost()).unwrap();
        let read = client.read(&mut [0u8; 8]).await.unwrap_err();
        let write = client.write(b"early").await.unwrap_err();
        for e in [read, write] {
            assert_eq!(e.kind(), std::io::ErrorKind::NotConnected, "{e}");
            assert!(e.to_string().contains("handshake()"), "{e}");
        }
    }
}
