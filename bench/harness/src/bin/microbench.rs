//! Hot paths, for instruction counts under `valgrind --tool=callgrind` (repeatable on a noisy
//! machine). `microbench OP 0` sets up only; `microbench OP 1` also runs the loop; the difference
//! of the two counts is the loop's. `microbench OP describe` prints what one loop covers.
//!
//! OP: mask (64 KiB masked 16 times), parse (1,000,000 frame headers), utf8 (64 KiB of
//! mixed-script text validated 16 times), engine (100,000 masked 64-byte frames through a server
//! `Connection`), deflate (1,000 JSON messages of ~1 KiB compressed by a client and inflated by a
//! server, context takeover), deflate-many and deflate-many-dedicated (64 server connections of
//! one config, taking turns: 1,000 messages of ~1 KiB received and sent back compressed, context
//! takeover; the default pool of 8 states per direction, or dedicated states: the connections
//! never wait for input, so pooled ones keep what they borrowed, the busy case (issue 31);
//! `microbench OP 1` prints the compressed bytes per message, to compare the ratios).

use std::hint::black_box;

use sockeye_proto::extension::deflate::{DeflateConfig, DeflateParams, PerMessageDeflate};
use sockeye_proto::frame::{FrameHeader, apply_mask};
use sockeye_proto::utf8::Utf8Validator;
use sockeye_proto::{Config, Connection, Message, Role};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let op = args.first().map(String::as_str).unwrap_or("");
    let run = args.get(1).map(String::as_str) == Some("1");
    if args.get(1).map(String::as_str) == Some("describe") {
        let unit = match op {
            "mask" => "1 MiB masked",
            "parse" => "1,000,000 headers",
            "utf8" => "~1 MiB validated",
            "engine" => "100,000 frames of 64 B",
            "deflate" | "deflate-dedicated" => "1,000 messages of ~1 KiB, both ways",
            "deflate-many" | "deflate-many-dedicated" => {
                "1,000 messages of ~1 KiB over 64 connections, both ways"
            }
            _ => "?",
        };
        println!("{unit}");
        return;
    }
    match op {
        "mask" => mask(run),
        "parse" => parse(run),
        "utf8" => utf8(run),
        "engine" => engine(run),
        "deflate" | "deflate-dedicated" => deflate(op, run),
        "deflate-many" | "deflate-many-dedicated" => deflate_many(op, run),
        other => eprintln!("unknown op {other:?}"),
    }
}

/// "mask", in a function of its own: its code generation is its own, not that of one `main`
/// holding every operation (a change to one operation's inlining moved another's count).
#[inline(never)]
fn mask(run: bool) {
    let mut buf = vec![0x5au8; 64 << 10];
    if run {
        for i in 0..16 {
            apply_mask(black_box(&mut buf), [1, 2, 3, 4], i);
        }
    }
    black_box(&buf);
}

/// "parse", in a function of its own: its code generation is its own, not that of one `main`
/// holding every operation (a change to one operation's inlining moved another's count).
#[inline(never)]
fn parse(run: bool) {
    let headers: Vec<Vec<u8>> = vec![
        vec![0x81, 0x85, 1, 2, 3, 4],
        vec![0x82, 0xFE, 0x01, 0x00, 1, 2, 3, 4],
        vec![0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 3, 4],
        vec![0x89, 0x80, 1, 2, 3, 4],
    ];
    if run {
        for i in 0..1_000_000 {
            let _ = black_box(FrameHeader::parse(black_box(&headers[i % 4])));
        }
    }
}

/// "utf8", in a function of its own: its code generation is its own, not that of one `main`
/// holding every operation (a change to one operation's inlining moved another's count).
#[inline(never)]
fn utf8(run: bool) {
    let text = "Sockeye лосось 鮭 🐟 ".repeat((64 << 10) / 30);
    if run {
        for _ in 0..16 {
            let mut v = Utf8Validator::new();
            let _ = black_box(v.feed(black_box(text.as_bytes())));
        }
    }
}

/// "engine", in a function of its own: its code generation is its own, not that of one `main`
/// holding every operation (a change to one operation's inlining moved another's count).
#[inline(never)]
fn engine(run: bool) {
    let key = [1u8, 2, 3, 4];
    let mut frame = vec![0x82, 0x80 | 64];
    frame.extend_from_slice(&key);
    frame.extend((0..64u8).map(|i| i ^ key[usize::from(i) % 4]));
    let batch: Vec<u8> = frame.iter().copied().cycle().take(frame.len() * 1000).collect();
    let mut server = Connection::server(Config::default());
    if run {
        for _ in 0..100 {
            server.receive(&batch);
            while let Ok(Some(m)) = server.poll_message() {
                black_box(m);
            }
        }
    }
}

/// "deflate" | "deflate-dedicated", in a function of its own: its code generation is its own, not that of one `main`
/// holding every operation (a change to one operation's inlining moved another's count).
#[inline(never)]
fn deflate(op: &str, run: bool) {
    let params = DeflateParams {
        server_no_context_takeover: false,
        client_no_context_takeover: false,
        server_max_window_bits: 15,
        client_max_window_bits: 15,
    };
    let mut config = DeflateConfig::default();
    if op == "deflate-dedicated" {
        config = config.pool(None);
    }
    let mut client = Connection::client(
        Config::default(),
        sockeye_proto::frame::insecure_mask_keys_for_tests(1),
    );
    client.set_deflate(Some(PerMessageDeflate::new(Role::Client, params, &config)));
    let mut server = Connection::server(Config::default());
    server.set_deflate(Some(PerMessageDeflate::new(Role::Server, params, &config)));
    if run {
        for i in 0..1000 {
            let json = format!(
                r#"{{"id":{i},"user":"sockeye","tags":["fish","salmon","river"],"text":"{}"}}"#,
                "the quick brown fox jumps over the lazy dog ".repeat(20)
            );
            client.send(Message::text(json)).ok();
            server.receive(&client.transmit_bytes());
            black_box(server.poll_message().ok());
        }
    }
}

/// "deflate-many" | "deflate-many-dedicated", in a function of its own: its code generation is its own, not that of one `main`
/// holding every operation (a change to one operation's inlining moved another's count).
#[inline(never)]
fn deflate_many(op: &str, run: bool) {
    let params = DeflateParams {
        server_no_context_takeover: false,
        client_no_context_takeover: false,
        server_max_window_bits: 15,
        client_max_window_bits: 15,
    };
    let mut server_config = DeflateConfig::default();
    if op == "deflate-many-dedicated" {
        server_config = server_config.pool(None);
    }
    // Clients keep dedicated states: only the server's side is measured for its pool.
    let client_config = DeflateConfig::default().pool(None);
    let mut pairs: Vec<(Connection, Connection)> = (0..64)
        .map(|i| {
            let mut client = Connection::client(
                Config::default(),
                sockeye_proto::frame::insecure_mask_keys_for_tests(i),
            );
            client.set_deflate(Some(PerMessageDeflate::new(Role::Client, params, &client_config)));
            let mut server = Connection::server(Config::default());
            server.set_deflate(Some(PerMessageDeflate::new(Role::Server, params, &server_config)));
            (client, server)
        })
        .collect();
    if run {
        let mut wire = 0usize;
        let mut plain = 0usize;
        for i in 0..1000 {
            let (client, server) = &mut pairs[i % 64];
            let json = format!(
                r#"{{"id":{i},"user":"sockeye","tags":["fish","salmon","river"],"text":"{}"}}"#,
                "the quick brown fox jumps over the lazy dog ".repeat(20)
            );
            plain += json.len();
            client.send(Message::text(json)).ok();
            server.receive(&client.transmit_bytes());
            if let Ok(Some(message)) = server.poll_message() {
                server.send(message).ok();
            }
            let echoed = server.transmit_bytes();
            wire += echoed.len();
            client.receive(&echoed);
            black_box(client.poll_message().ok());
        }
        println!(
            "server sent {:.1} bytes per message of {:.1} ({:.2}×)",
            wire as f64 / 1000.0,
            plain as f64 / 1000.0,
            plain as f64 / wire as f64
        );
    }
}
