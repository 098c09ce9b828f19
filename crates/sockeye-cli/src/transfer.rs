//! `send` and `receive`: a file through a relay (`ws transfer` or `broadcast_server`).
//!
//! Protocol, all in WebSocket messages: the sender announces the file in a text message
//! `sockeye-file v1\n<size>\n<sha256 hex>\n<name>`, sends the bytes as one binary message in 64 KiB
//! fragments, then waits for `sockeye-ack v1\n<sha256 hex>` from a receiver. The receiver checks
//! size and SHA-256 before writing anything, writes to a temporary file and renames it, so a
//! corrupt or truncated transfer never leaves a bad file behind. Start `receive` first.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use sockeye::{Bytes, DataKind, Message};

use crate::cli::{ReceiveArgs, SendArgs};
use crate::client::{Client, close_normally, connect, connect_with_config, interruptible};
use crate::failure::Failure;
use crate::output::errln;
use crate::tls::client_config;

const HEADER: &str = "sockeye-file v1";
const ACK: &str = "sockeye-ack v1";
const FRAGMENT: usize = 64 << 10;

pub(crate) async fn send(args: SendArgs) -> Result<(), Failure> {
    let data = tokio::fs::read(&args.path)
        .await
        .map_err(|e| Failure::new(format!("{}: {e}", args.path.display())))?;
    let name = args
        .path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Failure::new(format!("{}: not a file name", args.path.display())))?;
    let digest = hex(&Sha256::digest(&data));
    let (mut ws, _) = connect(&args.client).await?;
    interruptible(&mut ws, async |ws| upload(ws, &args, data, &digest, name).await).await
}

/// Announces, sends and waits for the receiver's acknowledgement.
async fn upload(
    ws: &mut Client,
    args: &SendArgs,
    data: Vec<u8>,
    digest: &str,
    name: &str,
) -> Result<(), Failure> {
    ws.send(Message::text(format!(
        "{HEADER}\n{}\n{digest}\n{name}",
        data.len()
    )))
    .await?;
    let data = Bytes::from(data);
    let total = data.len();
    let started = Instant::now();
    let mut offset = 0;
    loop {
        let end = (offset + FRAGMENT).min(total);
        ws.send_fragment(DataKind::Binary, data.slice(offset..end), end == total)
            .await?;
        offset = end;
        if offset % (FRAGMENT * 16) == 0 || offset == total {
            ws.flush().await?;
            progress("sent", offset, total, started);
        }
        if offset == total {
            break;
        }
    }
    errln!("");
    let wait = tokio::time::timeout(Duration::from_secs(args.ack_timeout), async {
        while let Some(item) = ws.recv().await {
            if let Message::Text(t) = item?
                && let Some(acked) = t.strip_prefix(&format!("{ACK}\n"))
            {
                return if acked == digest {
                    Ok(())
                } else {
                    Err(Failure::new(
                        "the receiver got different bytes (checksum mismatch)",
                    ))
                };
            }
        }
        Err(Failure::new(
            "the relay closed the connection before a receiver acknowledged",
        ))
    });
    match wait.await {
        Ok(Ok(())) => {
            errln!("{name}: {total} bytes delivered, sha256 {digest}");
            close_normally(ws).await;
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Failure::new(format!(
            "no receiver acknowledged within {} s",
            args.ack_timeout
        ))),
    }
}

pub(crate) async fn receive(args: ReceiveArgs) -> Result<(), Failure> {
    let mut config = client_config(&args.client)?;
    config.protocol.max_message_size = args.max_size;
    let (mut ws, _) = connect_with_config(&args.client, &args.client.url, &config).await?;
    errln!("waiting for a file on {}", args.client.url);
    interruptible(&mut ws, async |ws| download(ws, &args).await).await
}

/// Waits for an announcement and its file, checks and writes it, and acknowledges.
async fn download(ws: &mut Client, args: &ReceiveArgs) -> Result<(), Failure> {
    let mut announced: Option<(usize, String, String)> = None;
    while let Some(item) = ws.recv().await {
        match item? {
            Message::Text(t) => announced = parse_header(&t),
            Message::Binary(data) => {
                let Some((size, digest, name)) = announced.take() else {
                    continue;
                };
                let got = hex(&Sha256::digest(&data));
                if data.len() != size || got != digest {
                    return Err(Failure::new(format!(
                        "{name}: corrupt transfer ({} of {size} bytes, sha256 {got}, expected {digest}); nothing written",
                        data.len()
                    )));
                }
                let path = write_atomically(&args.output_dir, &name, &data).await?;
                ws.send(Message::text(format!("{ACK}\n{got}"))).await?;
                errln!("{}: {size} bytes, sha256 {got}", path.display());
                close_normally(ws).await;
                return Ok(());
            }
            _ => {}
        }
    }
    Err(Failure::new("the connection closed before a file arrived"))
}

/// `(size, sha256, name)` from an announcement; the name is reduced to a plain file name so that a
/// hostile sender cannot write outside the output directory.
fn parse_header(text: &str) -> Option<(usize, String, String)> {
    let mut lines = text.splitn(4, '\n');
    if lines.next()? != HEADER {
        return None;
    }
    let size = lines.next()?.parse().ok()?;
    let digest = lines.next()?.to_string();
    let name = Path::new(lines.next()?).file_name()?.to_str()?.to_string();
    (digest.len() == 64 && name != "..").then_some((size, digest, name))
}

async fn write_atomically(dir: &Path, name: &str, data: &[u8]) -> Result<PathBuf, Failure> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.part-{}", std::process::id()));
    let io = |e: std::io::Error| Failure::new(format!("{}: {e}", path.display()));
    tokio::fs::write(&tmp, data).await.map_err(io)?;
    tokio::fs::rename(&tmp, &path).await.map_err(io)?;
    Ok(path)
}

fn progress(what: &str, done: usize, total: usize, started: Instant) {
    let mib = |n: usize| n as f64 / (1 << 20) as f64;
    let pct = if total == 0 {
        100.0
    } else {
        done as f64 * 100.0 / total as f64
    };
    let rate = mib(done) / started.elapsed().as_secs_f64().max(1e-6);
    // A progress line redrawn in place; a closed stderr is no reason to stop the transfer.
    let _ = write!(
        std::io::stderr(),
        "\r{what} {:.1} / {:.1} MiB ({pct:.0}%) {rate:.1} MiB/s",
        mib(done),
        mib(total)
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::parse_header;

    #[test]
    fn announcements_cannot_escape_the_output_directory() {
        let d = "a".repeat(64);
        assert_eq!(
            parse_header(&format!("sockeye-file v1\n3\n{d}\nx.bin")),
            Some((3, d.clone(), "x.bin".into()))
        );
        assert_eq!(
            parse_header(&format!("sockeye-file v1\n3\n{d}\n../../etc/passwd"))
                .unwrap()
                .2,
            "passwd"
        );
        assert_eq!(parse_header(&format!("sockeye-file v1\n3\n{d}\n..")), None);
        assert_eq!(parse_header(&format!("sockeye-file v1\n3\n{d}\n/")), None);
        assert_eq!(parse_header("sockeye-file v1\nthree\nx\ny"), None);
        assert_eq!(parse_header("hello"), None);
    }
}
