//! The hot path allocates nothing per small message: a busy connection's messages, compressed
//! (permessage-deflate, dedicated and pooled states) or not, each way, cost no heap allocation
//! once the connection's buffers have grown for them.
//!
//! Allocations are counted by a counting allocator (stats_alloc) for the whole test binary; each
//! test holds a lock while it counts, so that one's allocations do not land in another's figures.
#![cfg(feature = "deflate")]
#![allow(clippy::unwrap_used)]

use std::alloc::System;
use std::sync::Mutex;

use bytes::{Buf, Bytes};
use sockeye_proto::extension::deflate::{DeflateConfig, DeflatePool};
use sockeye_proto::{Config, Connection, Message};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

mod common;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// One counting test at a time.
static COUNTING: Mutex<()> = Mutex::new(());

/// A client and a server, with permessage-deflate negotiated when `deflate` is given.
fn pair(deflate: Option<DeflateConfig>) -> (Connection, Connection) {
    let mut config = Config::default();
    config.deflate = deflate;
    common::negotiated_pair(config.clone(), config)
}

/// Moves what `from` has to write into `to`, as an I/O layer does (no copy of our own).
fn carry(from: &mut Connection, to: &mut Connection) {
    let transmit = from.transmit();
    while transmit.has_remaining() {
        let n = transmit.chunk().len();
        to.receive(transmit.chunk());
        transmit.advance(n);
    }
}

/// One echo: the client sends `payload`, the server sends back what it received, the client
/// checks it.
fn echo(c: &mut Connection, s: &mut Connection, payload: &Bytes) {
    c.send(Message::Text(payload.clone().try_into().unwrap()))
        .unwrap();
    carry(c, s);
    let got = s
        .poll_message()
        .unwrap()
        .expect("the server receives the message");
    s.send(got).unwrap();
    carry(s, c);
    let back = c.poll_message().unwrap().expect("the client receives the echo");
    assert_eq!(back.as_payload(), &payload[..]);
}

/// Allocations (of any size, reallocations included) while `echoes` echoes run, after as many
/// to warm up.
fn allocations_per_echo(deflate: Option<DeflateConfig>, echoes: usize) -> f64 {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let (mut c, mut s) = pair(deflate);
    let payload = Bytes::from_static(
        br#"{"channel":"prices","event":"tick","data":{"symbol":"ABC","bid":101.25,"ask":101.5}}"#,
    );
    for _ in 0..echoes {
        echo(&mut c, &mut s, &payload);
    }
    let before = GLOBAL.stats();
    for _ in 0..echoes {
        echo(&mut c, &mut s, &payload);
    }
    let after = GLOBAL.stats();
    let count = (after.allocations + after.reallocations) - (before.allocations + before.reallocations);
    count as f64 / echoes as f64
}

#[test]
fn uncompressed_echoes_allocate_nothing_per_message() {
    let per_echo = allocations_per_echo(None, 1000);
    assert!(per_echo < 0.01, "{per_echo} allocations per echo");
}

#[test]
fn compressed_echoes_allocate_nothing_per_message_with_dedicated_states() {
    let per_echo = allocations_per_echo(Some(DeflateConfig::default().pool(None)), 1000);
    assert!(per_echo < 0.01, "{per_echo} allocations per echo");
}

#[test]
fn compressed_echoes_allocate_nothing_per_message_with_pooled_states() {
    let pool = DeflatePool::new(8);
    let per_echo = allocations_per_echo(Some(DeflateConfig::default().pool(Some(pool))), 1000);
    assert!(per_echo < 0.01, "{per_echo} allocations per echo");
}

/// Bytes of heap in use by the whole test process (stats_alloc counts a realloc's growth and
/// shrinking in `bytes_allocated` and `bytes_deallocated`).
fn heap_in_use() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// The buffers that make a busy connection's messages free of allocations go back with its
/// pooled states at a wait for input: an idle connection keeps none.
#[test]
fn a_wait_for_input_lets_go_of_the_message_buffers() {
    let _counting = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let (mut c, mut s) = pair(Some(DeflateConfig::default().pool(Some(DeflatePool::new(8)))));
    let payload = Bytes::from_static(
        br#"{"channel":"prices","event":"tick","data":{"symbol":"ABC","bid":101.25,"ask":101.5}}"#,
    );
    for _ in 0..100 {
        echo(&mut c, &mut s, &payload);
    }
    let before = heap_in_use();
    s.release_idle_deflate();
    let freed = before - heap_in_use();
    // The 4 KiB buffer small messages share, the 1 KiB one they are inflated into, and the one
    // sends are compressed into (the states go to the pool, which keeps them: not counted).
    assert!(freed > 4 << 10, "{freed} bytes let go at the wait");
    // And the next message is whole.
    echo(&mut c, &mut s, &payload);
}
