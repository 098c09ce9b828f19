//! Opening the tunnel: HTTP `CONNECT` (RFC 9110 §9.3.6) with basic authentication, SOCKS5
//! (RFC 1928) with username/password authentication (RFC 1929), and the `host:port` and
//! error-context helpers the client's connection errors share.

use std::net::IpAddr;

use base64::Engine as _;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::config::{Proxy, ProxyKind};
use super::error::ProxyError;
use crate::error::Error;
use crate::head::{HeadError, read_head};

impl Proxy {
    /// Opens a TCP connection to the proxy and a tunnel through it to `host:port`. I/O errors
    /// (the proxy refusing the connection, closing it) name the proxy and the destination.
    pub async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, Error> {
        let named = |e: std::io::Error, doing: &str| -> Error {
            let (proxy, target) = (self.authority(), authority(host, port));
            with_context(e, format_args!("{doing} the proxy {proxy} (for {target})")).into()
        };
        let mut tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| named(e, "connecting to"))?;
        let tunnel = match self.kind {
            ProxyKind::HttpConnect => self.http_connect(&mut tcp, host, port).await,
            ProxyKind::Socks5 | ProxyKind::Socks5RemoteDns => self.socks5_connect(&mut tcp, host, port).await,
        };
        match tunnel {
            Ok(()) => Ok(tcp),
            Err(Error::Io(e)) => Err(named(e, "opening a tunnel through")),
            Err(e) => Err(e),
        }
    }

    /// `host:port` of the proxy, with an IPv6 address in brackets.
    pub(crate) fn authority(&self) -> String {
        authority(&self.host, self.port)
    }

    async fn http_connect(&self, tcp: &mut TcpStream, host: &str, port: u16) -> Result<(), Error> {
        let authority = authority(host, port);
        let mut request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
        if let Some((user, password)) = &self.credentials {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            request.push_str(&format!("Proxy-Authorization: Basic {token}\r\n"));
        }
        request.push_str("\r\n");
        tcp.write_all(request.as_bytes()).await?;
        // Read the response head byte-exactly: whatever follows it belongs to the tunnel, and a
        // proxy sends nothing more until we speak.
        let mut head = BytesMut::with_capacity(512);
        let read = read_head(tcp, &mut head, 16 << 10, |buf| {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = response.code.unwrap_or(0);
                    let reason = response.reason.unwrap_or("").to_string();
                    Ok(Some(((status, reason), n)))
                }
                Ok(httparse::Status::Partial) => Ok(None),
                Err(_) => Err(ProxyError::Malformed("unparsable CONNECT response")),
            }
        })
        .await;
        let ((status, reason), leftover) = match read {
            Ok(read) => read,
            Err(HeadError::Parse(e)) => return Err(e.into()),
            Err(HeadError::TooLarge) => return Err(ProxyError::Malformed("response head over 16 KiB").into()),
            Err(HeadError::Eof) => {
                return Err(ProxyError::Malformed("closed before answering CONNECT").into());
            }
            Err(HeadError::Io(e)) => return Err(e.into()),
        };
        if !(200..300).contains(&status) {
            // A refusal may carry a body (tinyproxy sends an HTML page); it is not read.
            return Err(ProxyError::Refused { status, reason }.into());
        }
        if !leftover.is_empty() {
            return Err(ProxyError::Malformed("data after the CONNECT response").into());
        }
        Ok(())
    }

    async fn socks5_connect(&self, tcp: &mut TcpStream, host: &str, port: u16) -> Result<(), Error> {
        // Greeting (§3): offer "no authentication", and username/password when we have them.
        let greeting: &[u8] = if self.credentials.is_some() {
            &[5, 2, 0x00, 0x02]
        } else {
            &[5, 1, 0x00]
        };
        tcp.write_all(greeting).await?;
        let mut choice = [0u8; 2];
        tcp.read_exact(&mut choice).await?;
        match choice {
            [5, 0x00] => {}
            [5, 0x02] => {
                // RFC 1929: version 1, user, password.
                let (user, password) = self
                    .credentials
                    .as_ref()
                    .ok_or(ProxyError::Malformed("unoffered method"))?;
                if user.len() > 255 || password.len() > 255 {
                    return Err(ProxyError::InvalidUrl(
                        "SOCKS5 user and password are at most 255 bytes".into(),
                    )
                    .into());
                }
                let mut auth = vec![1, user.len() as u8];
                auth.extend_from_slice(user.as_bytes());
                auth.push(password.len() as u8);
                auth.extend_from_slice(password.as_bytes());
                tcp.write_all(&auth).await?;
                let mut status = [0u8; 2];
                tcp.read_exact(&mut status).await?;
                if status[1] != 0 {
                    return Err(ProxyError::AuthFailed.into());
                }
            }
            [5, 0xFF] => return Err(ProxyError::NoAcceptableAuth.into()),
            _ => return Err(ProxyError::Malformed("bad method selection").into()),
        }
        // CONNECT request (§4): the address as IPv4, IPv6 or (SOCKS5h) a domain name, then the port.
        let mut request = vec![5, 1, 0];
        let literal: Option<IpAddr> = host.parse().ok();
        let address = match (literal, self.kind) {
            (Some(ip), _) => Some(ip),
            (None, ProxyKind::Socks5) => Some(
                tokio::net::lookup_host((host, port))
                    .await?
                    .next()
                    .map(|a| a.ip())
                    .ok_or_else(|| {
                        std::io::Error::new(std::io::ErrorKind::NotFound, format!("{host}: no address"))
                    })?,
            ),
            (None, _) => None,
        };
        match address {
            Some(IpAddr::V4(v4)) => {
                request.push(1);
                request.extend_from_slice(&v4.octets());
            }
            Some(IpAddr::V6(v6)) => {
                request.push(4);
                request.extend_from_slice(&v6.octets());
            }
            None => {
                if host.len() > 255 {
                    return Err(ProxyError::InvalidUrl("host name over 255 bytes".into()).into());
                }
                request.push(3);
                request.push(host.len() as u8);
                request.extend_from_slice(host.as_bytes());
            }
        }
        request.extend_from_slice(&port.to_be_bytes());
        self.socks5_finish(tcp, &request).await
    }

    /// Sends the CONNECT request and reads the whole reply (§6), bound address included.
    async fn socks5_finish(&self, tcp: &mut TcpStream, request: &[u8]) -> Result<(), Error> {
        tcp.write_all(request).await?;
        let mut reply = [0u8; 4];
        tcp.read_exact(&mut reply).await?;
        if reply[0] != 5 {
            return Err(ProxyError::Malformed("bad reply version").into());
        }
        if reply[1] != 0 {
            return Err(ProxyError::SocksReply(reply[1]).into());
        }
        let rest = match reply[3] {
            1 => 4 + 2,
            4 => 16 + 2,
            3 => usize::from(tcp.read_u8().await?) + 2,
            _ => return Err(ProxyError::Malformed("bad address type in reply").into()),
        };
        let mut bound = vec![0u8; rest];
        tcp.read_exact(&mut bound).await?;
        Ok(())
    }
}

/// `host:port`, with an IPv6 address in brackets.
pub(crate) fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `e` with `what` in front of its message, and its kind kept (so that `ConnectionRefused` or
/// `TimedOut` can still be matched on).
pub(crate) fn with_context(e: std::io::Error, what: std::fmt::Arguments<'_>) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}
