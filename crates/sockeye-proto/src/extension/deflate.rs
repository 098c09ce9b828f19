//! permessage-deflate, RFC 7692: negotiation of its four parameters, and the compressor and
//! decompressor a connection uses.
//!
//! Backend: `flate2` over `zlib-rs` (pure Rust), chosen by measurement (`bench/deflate-backends`):
//! on 1 KiB JSON messages, sync-flushed with context takeover, it compressed at about 2× and
//! inflated at about 3× the speed of `miniz_oxide`, and unlike `miniz_oxide` it can limit the
//! compression window, which honouring `*_max_window_bits` requires.
//!
//! **Window bits 8.** zlib (and zlib-rs) cannot produce a raw deflate stream with a 256-byte window.
//! When the peer limits our compressor to 8 bits, Sockeye accepts the limit and sends every message
//! uncompressed (RSV1 clear), which RFC 7692 allows message by message; it still inflates what
//! the peer sends (a 512-byte window decodes a 256-byte-window stream).
//!
//! **Memory.** A zlib-rs compressor is about 300 KiB whatever its window (its hash table alone is
//! a fixed 128 KiB) and a decompressor about 40 KiB with a 15-bit window, so a connection that
//! kept both between messages held ~344 KiB. By default idle connections keep neither: a
//! connection borrows a compressor (decompressor) from a [`DeflatePool`] shared by the connections
//! of one [`DeflateConfig`] at its first compressed message, keeps it while it is busy, and gives
//! it back when it goes idle: when it waits — for input, for the transport to take output, or
//! with its output written and nothing buffered to read
//! ([`Connection::release_idle_buffers`](crate::Connection::release_idle_buffers), called by the
//! I/O layer as for its read buffer, see [`Connection`](crate::Connection)'s "Waits"; a message
//! in progress keeps its state through the wait). A connection starts waiting, and input makes
//! it busy. A wait for input through which the I/O layer runs the engine's timer (the tokio
//! layer's, [`Connection::linger_deflate`](crate::Connection::linger_deflate)) keeps them for
//! [`DeflateConfig::linger`] (50 ms) and gives them back after a whole linger without input
//! (from the connection's second busy spell: its first wait gives them back at once). A
//! connection whose messages come a few milliseconds apart so pays no pool round trip, reset or
//! priming per message (giving them back at every wait cost uWebSockets' load test a quarter of
//! its throughput), and an idle connection holds no zlib state. A message compressed (or
//! inflated) while the connection waits (a push: no input since its last wait) gives its state
//! back when it ends, there being no wait to give it back at. A state given back
//! remembers whose context it holds; the next message of the same connection gets the same state
//! back, context intact, unless the pool lent it to another connection in between (a state held
//! by a connection is never lent). Context takeover (§7.1.1) survives that too: each connection
//! keeps the plaintext its context covers (its last messages, at most a window: 2^bits bytes),
//! and a state lent to it without its context is reset and primed with that text
//! (deflateSetDictionary / inflateSetDictionary, valid for raw deflate). The trade-offs, as
//! uWebSockets' `SHARED_COMPRESSOR`/`DEDICATED_COMPRESSOR` put them:
//!
//! - pooled (the default, [`DeflateConfig::pool`] `Some`): an idle connection holds only the text
//!   of its context, up to 2^bits bytes each way (a few KiB after small messages, ≤ 64 KiB at 15
//!   bits), and the pool holds at most [`DeflatePool::idle_limit`] idle states per direction
//!   (busy connections hold theirs). A connection whose state was lent to another pays a reset
//!   and a re-prime on its next message after a wait (tens of µs at 15 bits): size the pool to
//!   the number of connections that send compressed messages at the same time;
//! - dedicated (`pool: None`): each connection keeps its own states (~344 KiB with context
//!   takeover), no re-priming ever: the fastest for many connections busy at once.
//!
//! Without context takeover nothing carries over between messages: pooled states are reset and
//! shared by all such connections (dedicated ones are freed after each message).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::offer::ExtensionOffer;
use crate::error::ProtocolViolation;
use crate::role::Role;

/// The extension's registered name.
pub const NAME: &str = "permessage-deflate";

/// What this endpoint asks for, or accepts, when negotiating permessage-deflate.
///
/// The names follow RFC 7692 §7.1: "server" parameters govern what the server compresses,
/// "client" parameters what the client compresses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeflateConfig {
    /// zlib compression level, 0–9. Default 1: on WebSocket-sized JSON it compresses about 5×
    /// faster than level 6 for about 35% more bytes (see `bench/deflate-backends`).
    pub level: u32,
    /// The largest LZ77 window (8–15 bits) the server may compress with. A client asks for it; a
    /// server compresses with at most this many bits. Default 15.
    pub server_max_window_bits: u8,
    /// The largest window the client may compress with. A client offers it (valueless when 15, so
    /// the server may lower it); a server asks clients that allow it to use at most this. Default 15.
    pub client_max_window_bits: u8,
    /// Ask for (client) or impose (server) a fresh compression context for every server message:
    /// less memory and CPU per message for the server, a worse ratio. Default false.
    pub server_no_context_takeover: bool,
    /// The same for client messages. Default false.
    pub client_no_context_takeover: bool,
    /// Messages shorter than this are sent uncompressed: compressing a few bytes costs time and
    /// often makes them longer. Default 32 bytes.
    pub min_compress_size: usize,
    /// Where connections borrow their compression states: at their first compressed message
    /// after a wait for input, kept while busy, given back when they wait again (see the
    /// [module docs](self) for the rule and the trade-offs). Connections made from clones of one
    /// config share it. Default `Some(DeflatePool::default())`: idle connections hold no zlib
    /// state. `None`: each connection keeps its own (~344 KiB with context takeover).
    pub pool: Option<DeflatePool>,
    /// Pooled: how long a connection waiting for input keeps the states it borrowed before it
    /// gives them back, when its I/O layer runs the engine's timer through the wait (the tokio
    /// layer does, at every wait for input; see
    /// [`Connection::linger_deflate`](crate::Connection::linger_deflate)). The states go back
    /// at the first look at the timer after the linger: with the tokio layer, the next poll of
    /// the receiving side, which its timer wakes; a handler that stops polling it after a wait
    /// (a `select!` whose other branch then waits a long time without sending) holds them
    /// until it polls again or sends (a send that empties the queue gives them back). Set it
    /// to zero for such handlers. A connection whose next
    /// message comes within it pays no pool round trip, reset or priming: on uWebSockets' load
    /// test (100 connections, one compressed message each in flight, so every connection waits
    /// for input after each) the server spent 14,600 instructions per message without it, 5,800
    /// with it (callgrind), about what dedicated states cost (issue 31). The cost: states stay out of the pool for up to twice
    /// this after a connection's last input, so about (connections with input per second ×
    /// linger) states are held (~344 KiB each with context takeover). A connection lingers from
    /// its second busy spell on: its first wait gives them back at once (a burst of new
    /// connections that each say one thing holds nothing). Default 50 ms.
    /// `Duration::ZERO`: give them back at every wait.
    pub linger: Duration,
}

impl Default for DeflateConfig {
    fn default() -> Self {
        DeflateConfig {
            level: 1,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            min_compress_size: 32,
            pool: Some(DeflatePool::default()),
            linger: Self::DEFAULT_LINGER,
        }
    }
}

impl DeflateConfig {
    /// The default [`linger`](Self::linger): 50 ms.
    pub const DEFAULT_LINGER: Duration = Duration::from_millis(50);

    /// Sets how long a pooled connection waiting for input keeps its states
    /// ([`linger`](Self::linger); `Duration::ZERO`: not at all).
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Sets the compression level (0–9).
    pub fn level(mut self, level: u32) -> Self {
        self.level = level;
        self
    }

    /// Sets the largest window the server may compress with (8–15 bits).
    pub fn server_max_window_bits(mut self, bits: u8) -> Self {
        self.server_max_window_bits = bits;
        self
    }

    /// Sets the largest window the client may compress with (8–15 bits).
    pub fn client_max_window_bits(mut self, bits: u8) -> Self {
        self.client_max_window_bits = bits;
        self
    }

    /// Asks for (client) or imposes (server) a fresh context for every server message.
    pub fn server_no_context_takeover(mut self, on: bool) -> Self {
        self.server_no_context_takeover = on;
        self
    }

    /// The same for client messages.
    pub fn client_no_context_takeover(mut self, on: bool) -> Self {
        self.client_no_context_takeover = on;
        self
    }

    /// Sets the size below which messages go uncompressed.
    pub fn min_compress_size(mut self, bytes: usize) -> Self {
        self.min_compress_size = bytes;
        self
    }

    /// Sets where compression states are borrowed from (`None`: dedicated per connection).
    pub fn pool(mut self, pool: Option<DeflatePool>) -> Self {
        self.pool = pool;
        self
    }
}

/// Compressors and decompressors lent to connections while they are busy, given back when they
/// wait for input (see the [module docs](self)). Cloning shares the pool. Two pools compare equal when their idle limits
/// are: the pool is a resource, its limit the setting.
///
/// ```
/// use sockeye_proto::extension::deflate::{DeflateConfig, DeflatePool};
/// // Up to 64 idle states each way, shared by every connection made from clones of `shared`.
/// let shared = DeflateConfig::default().pool(Some(DeflatePool::new(64)));
/// assert_eq!(shared.pool.as_ref().map(DeflatePool::idle_limit), Some(64));
/// // Each connection keeps its own states (~344 KiB with context takeover): no re-priming ever.
/// let dedicated = DeflateConfig::default().pool(None);
/// assert!(dedicated.pool.is_none());
/// ```
#[derive(Clone)]
pub struct DeflatePool {
    shared: Arc<PoolShared>,
}

struct PoolShared {
    idle_limit: usize,
    compressors: Mutex<Shelf<Compress>>,
    decompressors: Mutex<Shelf<Decompress>>,
    next_owner: AtomicU64,
}

/// One direction's states: those idle in the pool, and the count of those held by connections.
struct Shelf<T> {
    idle: VecDeque<Lent<T>>,
    /// States out of the pool, held by busy connections.
    held: usize,
    /// Borrows since the pool was made.
    borrows: u64,
}

impl<T> Default for Shelf<T> {
    fn default() -> Self {
        Shelf {
            idle: VecDeque::new(),
            held: 0,
            borrows: 0,
        }
    }
}

/// An idle state in the pool: what it was made for (level and window bits) and whose context it
/// holds (0: nobody's, to be reset before use).
struct Lent<T> {
    kind: (u32, u8),
    owner: u64,
    state: T,
}

/// What the pool lent: the borrower's own state, context intact, or another's, to reset.
enum Borrowed<T> {
    Kept(T),
    Other(T),
}

impl DeflatePool {
    /// Idle states kept per direction by default: 8 (at most ~2.7 MiB for the pool).
    pub const DEFAULT_IDLE_LIMIT: usize = 8;

    /// A pool that keeps at most `idle_limit` idle compressors and as many decompressors; states
    /// given back beyond that are freed, oldest first. 0 keeps nothing: every busy spell (from a
    /// connection's first message after a wait for input to its next wait) allocates.
    pub fn new(idle_limit: usize) -> Self {
        DeflatePool {
            shared: Arc::new(PoolShared {
                idle_limit,
                compressors: Mutex::new(Shelf::default()),
                decompressors: Mutex::new(Shelf::default()),
                next_owner: AtomicU64::new(1),
            }),
        }
    }

    /// The most idle states kept per direction.
    pub fn idle_limit(&self) -> usize {
        self.shared.idle_limit
    }

    /// Idle (compressors, decompressors) in the pool now.
    pub fn idle(&self) -> (usize, usize) {
        (
            lock(&self.shared.compressors).idle.len(),
            lock(&self.shared.decompressors).idle.len(),
        )
    }

    /// (compressors, decompressors) held by connections now: out of the pool, between a
    /// connection's first message after a wait and its next wait for input (see the
    /// [module docs](self)).
    pub fn held(&self) -> (usize, usize) {
        (
            lock(&self.shared.compressors).held,
            lock(&self.shared.decompressors).held,
        )
    }

    /// (compressors, decompressors) borrowed from the pool since it was made: a connection
    /// borrows once per busy spell, not once per message.
    pub fn borrows(&self) -> (u64, u64) {
        (
            lock(&self.shared.compressors).borrows,
            lock(&self.shared.decompressors).borrows,
        )
    }

    fn new_owner(&self) -> u64 {
        self.shared.next_owner.fetch_add(1, Ordering::Relaxed)
    }
}

impl Default for DeflatePool {
    fn default() -> Self {
        DeflatePool::new(Self::DEFAULT_IDLE_LIMIT)
    }
}

impl std::fmt::Debug for DeflatePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (compressors, decompressors) = self.idle();
        f.debug_struct("DeflatePool")
            .field("idle_limit", &self.shared.idle_limit)
            .field("idle_compressors", &compressors)
            .field("idle_decompressors", &decompressors)
            .finish()
    }
}

impl PartialEq for DeflatePool {
    fn eq(&self, other: &Self) -> bool {
        self.shared.idle_limit == other.shared.idle_limit
    }
}

impl Eq for DeflatePool {}

/// A poisoned lock only means another thread panicked while moving states in or out of the
/// queue; the queue itself is always whole, so go on with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes the borrower's own idle state if the pool still has it, else the least recently
/// returned one of the right kind; `None`: the borrower makes a new one. Either way the state
/// counts as held until it is given back.
fn borrow<T>(shelf: &Mutex<Shelf<T>>, kind: (u32, u8), owner: u64) -> Option<Borrowed<T>> {
    let mut shelf = lock(shelf);
    shelf.held += 1;
    shelf.borrows += 1;
    let idle = &mut shelf.idle;
    if let Some(i) = idle.iter().rposition(|l| l.owner == owner && l.kind == kind) {
        return idle.remove(i).map(|l| Borrowed::Kept(l.state));
    }
    let i = idle.iter().position(|l| l.kind == kind)?;
    idle.remove(i).map(|l| Borrowed::Other(l.state))
}

/// Returns a held state; the oldest idle one is freed (outside the lock) when past the limit.
fn give_back<T>(shelf: &Mutex<Shelf<T>>, limit: usize, lent: Lent<T>) {
    let evicted = {
        let mut shelf = lock(shelf);
        shelf.held = shelf.held.saturating_sub(1);
        shelf.idle.push_back(lent);
        (shelf.idle.len() > limit)
            .then(|| shelf.idle.pop_front())
            .flatten()
    };
    drop(evicted);
}

/// The plaintext a compression context covers (the last 2^bits bytes since it started), kept so
/// that a pooled state can be primed with it. A ring: appending a small message to a full window
/// costs its own length, not the window's.
#[derive(Debug, Default)]
struct History {
    bytes: VecDeque<u8>,
    window: usize,
}

impl History {
    fn new(bits: u8) -> Self {
        History {
            bytes: VecDeque::new(),
            window: 1 << bits,
        }
    }

    fn push(&mut self, data: &[u8]) {
        let data = &data[data.len().saturating_sub(self.window)..];
        let excess = (self.bytes.len() + data.len()).saturating_sub(self.window);
        self.bytes.drain(..excess);
        let needed = self.bytes.len() + data.len();
        if needed > self.bytes.capacity() {
            // Grow geometrically but never past the window.
            let target = (self.bytes.capacity() * 2).clamp(needed, self.window.max(needed));
            self.bytes.reserve_exact(target - self.bytes.len());
        }
        self.bytes.extend(data);
    }

    fn clear(&mut self) {
        self.bytes.clear();
    }

    fn contiguous(&mut self) -> &[u8] {
        self.bytes.make_contiguous()
    }
}

/// The parameters both ends agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateParams {
    /// The server resets its compression context after every message.
    pub server_no_context_takeover: bool,
    /// The client resets its compression context after every message.
    pub client_no_context_takeover: bool,
    /// The server compresses with at most this many window bits.
    pub server_max_window_bits: u8,
    /// The client compresses with at most this many window bits.
    pub client_max_window_bits: u8,
}

/// The parameters of one offer or response, checked against RFC 7692 §7.1's grammar.
#[derive(Debug, Default)]
struct Parsed {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: Option<u8>,
    /// `Some(None)`: present without a value (allowed only in a client's offer).
    client_max_window_bits: Option<Option<u8>>,
}

impl Parsed {
    /// Rejects unknown or repeated parameters and values outside 8–15 (§7.1).
    fn from_offer(offer: &ExtensionOffer) -> Result<Parsed, String> {
        let mut p = Parsed::default();
        let mut seen: Vec<&str> = Vec::new();
        for (name, value) in &offer.params {
            if seen.contains(&name.as_str()) {
                return Err(format!("parameter {name} appears twice"));
            }
            seen.push(name);
            match (name.as_str(), value) {
                ("server_no_context_takeover", None) => p.server_no_context_takeover = true,
                ("client_no_context_takeover", None) => p.client_no_context_takeover = true,
                ("server_max_window_bits", Some(v)) => p.server_max_window_bits = Some(window_bits(v)?),
                ("client_max_window_bits", None) => p.client_max_window_bits = Some(None),
                ("client_max_window_bits", Some(v)) => p.client_max_window_bits = Some(Some(window_bits(v)?)),
                (name, _) => return Err(format!("unknown or malformed parameter {name}")),
            }
        }
        Ok(p)
    }
}

/// A window size: 1*DIGIT between 8 and 15, with no leading zero (§7.1.2.1). Digits only: Rust's
/// integer parser also takes a leading `+`.
fn window_bits(value: &str) -> Result<u8, String> {
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<u8>() {
        Ok(bits @ 8..=15) if digits && !value.starts_with('0') => Ok(bits),
        _ => Err(format!("window bits {value:?} outside 8..15")),
    }
}

impl DeflateConfig {
    /// The offer a client sends.
    pub fn client_offer(&self) -> ExtensionOffer {
        let mut params = Vec::new();
        if self.server_no_context_takeover {
            params.push(("server_no_context_takeover".into(), None));
        }
        if self.client_no_context_takeover {
            params.push(("client_no_context_takeover".into(), None));
        }
        if self.server_max_window_bits < 15 {
            params.push((
                "server_max_window_bits".into(),
                Some(self.server_max_window_bits.to_string()),
            ));
        }
        // Valueless: "we can limit our window if you want" (§7.1.2.2).
        let client_bits = (self.client_max_window_bits < 15).then(|| self.client_max_window_bits.to_string());
        params.push(("client_max_window_bits".into(), client_bits));
        ExtensionOffer {
            name: NAME.into(),
            params,
        }
    }

    /// A server's choice among a client's offers (§5.1): the first permessage-deflate offer it can
    /// accept, with the parameters agreed and the response to send. Offers it cannot honour
    /// (unknown or repeated parameters, invalid values) are declined and the next one is tried.
    pub fn accept_offers(&self, offers: &[ExtensionOffer]) -> Option<(DeflateParams, ExtensionOffer)> {
        offers
            .iter()
            .filter(|o| o.name.eq_ignore_ascii_case(NAME))
            .find_map(|o| self.accept_offer(o))
    }

    fn accept_offer(&self, offer: &ExtensionOffer) -> Option<(DeflateParams, ExtensionOffer)> {
        let asked = Parsed::from_offer(offer).ok()?;
        let mut params = Vec::new();
        let server_no_context_takeover = asked.server_no_context_takeover || self.server_no_context_takeover;
        if server_no_context_takeover {
            params.push(("server_no_context_takeover".into(), None));
        }
        // §7.1.1.2: a server may impose client_no_context_takeover even when not offered.
        let client_no_context_takeover = asked.client_no_context_takeover || self.client_no_context_takeover;
        if client_no_context_takeover {
            params.push(("client_no_context_takeover".into(), None));
        }
        // §7.1.2.1: answer a requested limit with the same or a smaller value.
        let server_bits = asked
            .server_max_window_bits
            .unwrap_or(15)
            .min(self.server_max_window_bits);
        if asked.server_max_window_bits.is_some() || server_bits < 15 {
            params.push(("server_max_window_bits".into(), Some(server_bits.to_string())));
        }
        // §7.1.2.2: the client's window can only be limited if it offered the parameter.
        let client_bits = match asked.client_max_window_bits {
            Some(limit) => {
                let bits = limit.unwrap_or(15).min(self.client_max_window_bits);
                if limit.is_some() || bits < 15 {
                    params.push(("client_max_window_bits".into(), Some(bits.to_string())));
                }
                bits
            }
            None => 15,
        };
        let agreed = DeflateParams {
            server_no_context_takeover,
            client_no_context_takeover,
            server_max_window_bits: server_bits,
            client_max_window_bits: client_bits,
        };
        Some((
            agreed,
            ExtensionOffer {
                name: NAME.into(),
                params,
            },
        ))
    }

    /// A client's check of the server's response (§7.1) to [`client_offer`](Self::client_offer).
    pub fn accept_response(&self, response: &ExtensionOffer) -> Result<DeflateParams, String> {
        let got = Parsed::from_offer(response)?;
        let server_bits = match got.server_max_window_bits {
            Some(bits) if bits > self.server_max_window_bits => {
                return Err(format!(
                    "server_max_window_bits={bits} exceeds the {} offered",
                    self.server_max_window_bits
                ));
            }
            Some(bits) => bits,
            None if self.server_max_window_bits < 15 => {
                return Err("server_max_window_bits was offered but not acknowledged".into());
            }
            None => 15,
        };
        let client_bits = match got.client_max_window_bits {
            Some(Some(bits)) => bits.min(self.client_max_window_bits),
            Some(None) => return Err("client_max_window_bits needs a value in a response".into()),
            None => self.client_max_window_bits,
        };
        Ok(DeflateParams {
            server_no_context_takeover: got.server_no_context_takeover,
            client_no_context_takeover: got.client_no_context_takeover || self.client_no_context_takeover,
            server_max_window_bits: server_bits,
            client_max_window_bits: client_bits,
        })
    }
}

/// The compression state of one connection.
pub struct PerMessageDeflate {
    level: u32,
    min_compress_size: usize,
    compress_bits: u8,
    compress_reset: bool,
    inflate_bits: u8,
    inflate_reset: bool,
    /// Dedicated: kept between messages (with context takeover). Pooled: held from the first
    /// message after a wait for input to [`release_idle`](Self::release_idle).
    deflater: Option<Compress>,
    inflater: Option<Decompress>,
    /// A message is being compressed (sent in pieces), or its compression failed: the deflater
    /// holds a context that is not the connection's between messages.
    mid_send: bool,
    /// A message is being inflated (or its inflation failed): the same for the inflater.
    mid_receive: bool,
    /// Pooled: no input has arrived since the connection last waited for input (or since it was
    /// made: a connection starts waiting), so it holds no state between messages: a message sent
    /// (a push) or inflated now gives its state back when it ends. There may never be a wait to
    /// give it back at: a connection that only pushes never waits for input.
    waiting: bool,
    /// `None`: dedicated states. `Some`: borrowed per message, as `owner`.
    pool: Option<DeflatePool>,
    owner: u64,
    /// Pooled: how long a wait for input keeps the states ([`DeflateConfig::linger`]).
    linger: Duration,
    /// Pooled: states were given back at a wait at least once: a connection that then borrows
    /// again lingers (see [`linger`](Self::linger)).
    gave_back: bool,
    /// Pooled with context takeover: the text our compression context covers, and the peer's.
    sent: History,
    received: History,
    /// Streaming receive: how much of the message's tail (§7.2.2) has been fed to the inflater.
    tail_fed: usize,
    /// What a message is compressed into, when it comes back after the frame was encoded from it
    /// ([`reuse_deflated`](Self::reuse_deflated)): kept while the compressor is held, so a busy
    /// connection's compressed sends allocate nothing per message.
    deflating: Vec<u8>,
    /// Whole messages ([`inflate_message`](Self::inflate_message)): what the message in progress
    /// has inflated to so far, a buffer reused from message to message.
    inflating: Vec<u8>,
    /// Whole messages of up to [`COPY_UP_TO`] bytes are copied here and leave as a `Bytes` that
    /// shares it: a busy connection allocates once per [`FINISHED_CHUNK`], not twice per message
    /// (the message's buffer and the `Bytes`' shared header, ~290 of a 5,100-instruction echo of
    /// a small compressed message, callgrind). Both buffers are held with the inflater and let
    /// go with it: a pooled connection keeps neither while it waits; dedicated states (~300 KiB)
    /// keep them (~5 KiB) as they keep the states.
    finished: BytesMut,
}

impl std::fmt::Debug for PerMessageDeflate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerMessageDeflate")
            .field("compress_bits", &self.compress_bits)
            .field("inflate_bits", &self.inflate_bits)
            .field("pooled", &self.pool.is_some())
            .finish_non_exhaustive()
    }
}

/// The four bytes a sync flush ends with, removed by the sender and restored by the receiver (§7.2).
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

/// A last frame of at most this many compressed bytes is inflated with its tail in one call, from
/// a copy on the stack: the copy costs less than a second call into the inflater.
const JOINED_TAIL_UP_TO: usize = 256;

/// An inflated whole message of at most this many bytes is copied into the connection's
/// [`finished`](PerMessageDeflate::finished) buffer (the copy costs less than the two
/// allocations it saves); a larger one leaves in the buffer it was inflated into.
const COPY_UP_TO: usize = 1024;

/// The size of [`finished`](PerMessageDeflate::finished)'s allocations. A `Bytes` kept by the
/// application keeps its chunk alive (as a message kept from the read buffer does), so it is
/// small.
const FINISHED_CHUNK: usize = 4096;

/// A message buffer ([`deflating`](PerMessageDeflate::deflating),
/// [`inflating`](PerMessageDeflate::inflating)) that grew past this for a large message is not
/// kept for the next one.
const KEEP_BUFFER_UP_TO: usize = 64 << 10;

impl PerMessageDeflate {
    /// The state for `role` after agreeing on `params`.
    pub fn new(role: Role, params: DeflateParams, config: &DeflateConfig) -> Self {
        let server = (params.server_max_window_bits, params.server_no_context_takeover);
        let client = (params.client_max_window_bits, params.client_no_context_takeover);
        let (ours, theirs) = match role {
            Role::Server => (server, client),
            Role::Client => (client, server),
        };
        // zlib needs at least 9 bits; a 9-bit window also decodes an 8-bit one (module docs).
        let inflate_bits = theirs.0.max(9);
        let pool = config.pool.clone();
        PerMessageDeflate {
            level: config.level.min(9),
            min_compress_size: config.min_compress_size,
            compress_bits: ours.0,
            compress_reset: ours.1,
            inflate_bits,
            inflate_reset: theirs.1,
            deflater: None,
            inflater: None,
            mid_send: false,
            mid_receive: false,
            // Holds nothing until input makes it busy (`note_input`): a connection that is never
            // told of input, or never of a wait, cannot keep a state for life.
            waiting: true,
            owner: pool.as_ref().map_or(0, DeflatePool::new_owner),
            linger: config.linger,
            gave_back: false,
            pool,
            sent: History::new(ours.0),
            received: History::new(inflate_bits),
            tail_fed: 0,
            deflating: Vec::new(),
            inflating: Vec::new(),
            finished: BytesMut::new(),
        }
    }

    /// Whether a message of `len` bytes should be sent compressed.
    pub(crate) fn should_compress(&self, len: usize) -> bool {
        // zlib cannot compress with an 8-bit window: send uncompressed (see the module docs).
        // Never an empty message: right after a sync flush the compressor has nothing to emit,
        // and an empty payload with RSV1 is not DEFLATE data (found by the connection fuzzer).
        len > 0 && len >= self.min_compress_size && self.compress_bits >= 9
    }

    /// Whether each message is compressed from a fresh state (no context takeover on our side),
    /// and so depends only on (level, window bits): the key under which a
    /// [`PreparedMessage`](crate::PreparedMessage) shares it.
    pub(crate) fn shared_key(&self) -> Option<(u32, u8)> {
        self.compress_reset.then_some((self.level, self.compress_bits))
    }

    /// The owner a state is given back under: nobody for a context that is not kept.
    fn owner_for(&self, reset: bool) -> u64 {
        if reset { 0 } else { self.owner }
    }

    /// Makes sure a compressor is held for the message being sent: our own, or one from the pool
    /// with our context.
    fn hold_deflater(&mut self) -> Result<&mut Compress, String> {
        if self.deflater.is_none() {
            let c = self.borrow_deflater()?;
            self.deflater = Some(c);
        }
        self.deflater.as_mut().ok_or_else(|| "no compressor".to_string())
    }

    /// A compressor from the pool (or a new one), primed with our context when it is not ours.
    #[cold]
    fn borrow_deflater(&mut self) -> Result<Compress, String> {
        let kind = (self.level, self.compress_bits);
        let borrowed = self
            .pool
            .as_ref()
            .and_then(|p| borrow(&p.shared.compressors, kind, self.owner));
        let mut c = match borrowed {
            Some(Borrowed::Kept(c)) => return Ok(c),
            Some(Borrowed::Other(mut c)) => {
                c.reset();
                c
            }
            None => Compress::new_with_window_bits(Compression::new(kind.0), false, kind.1),
        };
        if !self.compress_reset && !self.sent.bytes.is_empty() {
            // §7.1.1: the peer still holds our last window; prime a fresh state with it.
            c.set_dictionary(self.sent.contiguous())
                .map_err(|e| format!("priming the compressor: {e}"))?;
        }
        Ok(c)
    }

    /// At the end of a message: the compressor stays held, reset first when no context is kept;
    /// a dedicated one without context takeover is freed until the next message. A pooled one
    /// goes back to the pool at once when the connection is waiting for input (the message was
    /// pushed, not an answer): no input, no wait to give it back at.
    fn message_compressed(&mut self) {
        self.mid_send = false;
        if self.waiting && self.return_deflater() {
            return;
        }
        if self.compress_reset {
            match (&self.pool, &mut self.deflater) {
                (Some(_), Some(c)) => c.reset(),
                _ => self.deflater = None,
            }
        }
    }

    /// Gives the held states back to the pool, where the next message of this connection finds
    /// them again unless another connection took them in between: to be called when the
    /// connection waits for input (see [`Connection::release_idle_buffers`]
    /// (crate::Connection::release_idle_buffers)). A state in the middle of a message stays held.
    /// Dedicated states are kept.
    pub(crate) fn release_idle(&mut self) {
        if self.pool.is_none() {
            return;
        }
        self.waiting = true;
        let deflater = !self.mid_send && self.return_deflater();
        let inflater = !self.mid_receive && self.return_inflater();
        self.gave_back |= deflater || inflater;
    }

    /// About to wait for input with the engine's timer running: how long to keep the held states
    /// before [`release_idle`](Self::release_idle), or `None` to give them back now (dedicated
    /// states, no linger configured, nothing held, or the connection's first busy spell: the
    /// connection then counts as waiting, so that a push gives its state back when it ends).
    ///
    /// Only a connection that came back for states it gave back lingers: most connections of a
    /// burst of new ones say one thing and go quiet, and lingering at their first wait held
    /// ~344 KiB each for connections opened within a linger of each other (the bench's 1,000
    /// idle deflate connections, opened one after another, each with one echo).
    ///
    /// A state held for a message in progress does not count: the wait cannot give it back, and
    /// a linger for it would only wake the connection every linger until the message ends.
    pub(crate) fn linger(&self) -> Option<Duration> {
        let holds =
            (self.deflater.is_some() && !self.mid_send) || (self.inflater.is_some() && !self.mid_receive);
        let lingers = self.pool.is_some() && self.gave_back && !self.linger.is_zero();
        (holds && lingers).then_some(self.linger)
    }

    /// A linger starts: the connection waits, keeping its states. A message pushed meanwhile (no
    /// input since the wait) gives its state back when it ends, as without a linger: only the
    /// answer to input keeps them, and a handler that stops reading and only pushes does not
    /// hold them until it reads again.
    pub(crate) fn start_waiting(&mut self) {
        self.waiting = true;
    }

    /// Gives the held compressor back to the pool, under our name when its context is kept.
    /// Returns whether it did (pooled, and one was held).
    fn return_deflater(&mut self) -> bool {
        let owner = self.owner_for(self.compress_reset);
        let Some(pool) = &self.pool else { return false };
        let Some(c) = self.deflater.take() else {
            return false;
        };
        give_back_deflater(pool, (self.level, self.compress_bits), c, owner);
        self.deflating = Vec::new();
        true
    }

    /// [`return_deflater`](Self::return_deflater) for the decompressor.
    fn return_inflater(&mut self) -> bool {
        let owner = self.owner_for(self.inflate_reset);
        let Some(pool) = &self.pool else { return false };
        let Some(d) = self.inflater.take() else {
            return false;
        };
        give_back_inflater(pool, self.inflate_bits, d, owner);
        self.drop_message_buffers();
        true
    }

    /// The inflater is let go: its message buffers go with it.
    fn drop_message_buffers(&mut self) {
        self.inflating = Vec::new();
        self.finished = BytesMut::new();
    }

    /// Input arrived: the connection is busy until it next waits ([`release_idle`](Self::release_idle)).
    #[inline]
    pub(crate) fn note_input(&mut self) {
        self.waiting = false;
    }

    /// The connection is over: gives every held state back as nobody's (its context is of no
    /// further use), or frees dedicated ones.
    pub(crate) fn release_all(&mut self) {
        self.mid_send = false;
        self.mid_receive = false;
        let (deflater, inflater) = (self.deflater.take(), self.inflater.take());
        self.deflating = Vec::new();
        self.drop_message_buffers();
        if let Some(pool) = &self.pool {
            if let Some(c) = deflater {
                give_back_deflater(pool, (self.level, self.compress_bits), c, 0);
            }
            if let Some(d) = inflater {
                give_back_inflater(pool, self.inflate_bits, d, 0);
            }
        }
    }

    /// Makes sure a decompressor is held for the message that is arriving (and after it, until
    /// [`release_idle`](Self::release_idle)).
    fn hold_inflater(&mut self) -> Result<(), ProtocolViolation> {
        self.mid_receive = true;
        if self.inflater.is_some() {
            return Ok(());
        }
        self.borrow_inflater()
    }

    /// A decompressor from the pool (or a new one), primed with the peer's context when it is
    /// not ours.
    #[cold]
    fn borrow_inflater(&mut self) -> Result<(), ProtocolViolation> {
        let kind = (0, self.inflate_bits);
        let borrowed = self
            .pool
            .as_ref()
            .and_then(|p| borrow(&p.shared.decompressors, kind, self.owner));
        let d = match borrowed {
            Some(Borrowed::Kept(d)) => d,
            Some(Borrowed::Other(mut d)) => {
                d.reset(false);
                self.prime(&mut d)?;
                d
            }
            None => {
                let mut d = Decompress::new_with_window_bits(false, kind.1);
                self.prime(&mut d)?;
                d
            }
        };
        self.inflater = Some(d);
        Ok(())
    }

    /// Gives a fresh decompressor the window the peer's next message may refer to.
    fn prime(&mut self, d: &mut Decompress) -> Result<(), ProtocolViolation> {
        if self.inflate_reset || self.received.bytes.is_empty() {
            return Ok(());
        }
        d.set_dictionary(self.received.contiguous())
            .map(drop)
            .map_err(|e| ProtocolViolation::Decompression(format!("priming the decompressor: {e}")))
    }

    /// At the end of a message: the decompressor stays held, reset first when no context is
    /// kept; a dedicated one without context takeover is freed until the next message. A pooled
    /// one goes back to the pool at once when the connection is waiting (input it was not told
    /// of, such as bytes handed over with the handshake): as for a push, there may be no wait to
    /// give it back at.
    fn message_inflated(&mut self) {
        self.mid_receive = false;
        let given_back = self.waiting && self.return_inflater();
        if given_back || !self.inflate_reset {
            return;
        }
        match (&self.pool, &mut self.inflater) {
            (Some(_), Some(d)) => d.reset(false),
            _ => {
                self.inflater = None;
                self.drop_message_buffers();
            }
        }
    }

    /// Compresses one whole message (§7.2.1): sync flush, then drop the trailing `00 00 FF FF`.
    ///
    /// `input` is never empty: the connection compresses only what
    /// [`should_compress`](Self::should_compress) accepts, and that refuses empty messages, which
    /// then cost no payload at all. (A compressor that has just sync-flushed emits nothing for
    /// empty input, and an empty payload with RSV1 is not DEFLATE data.)
    pub(crate) fn compress(&mut self, input: &[u8]) -> Result<Vec<u8>, String> {
        debug_assert!(!input.is_empty(), "empty messages are sent uncompressed");
        self.compress_fragment(input, true)
    }

    /// Compresses the next fragment of a message sent in pieces (§7.2.1 over §5.4). Each piece is
    /// sync-flushed, so the peer can inflate all of it as soon as it arrives (a streamed message
    /// must not wait for its end); only the last (`fin`) loses the trailing `00 00 FF FF`. The
    /// compressor is held from the first piece to the last (borrowed from the pool, if any, for
    /// that long).
    ///
    /// The connection starts a compressed message only with a non-empty first piece (see
    /// [`compress`](Self::compress)); later pieces may be empty.
    pub(crate) fn compress_fragment(&mut self, input: &[u8], fin: bool) -> Result<Vec<u8>, String> {
        self.mid_send = true;
        let mut out = std::mem::take(&mut self.deflating);
        out.clear();
        out.reserve(input.len() / 2 + 64);
        let c = self.hold_deflater()?;
        let start = c.total_in();
        loop {
            let consumed = (c.total_in() - start) as usize;
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(64));
            }
            // On error the state stays held (`mid_send`) until the connection ends, and goes back
            // to the pool as nobody's: the connection fails anyway.
            c.compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| e.to_string())?;
            // Done when all input is in and the flush left room to spare.
            if (c.total_in() - start) as usize == input.len() && out.len() < out.capacity() {
                break;
            }
        }
        if self.pool.is_some() && !self.compress_reset {
            self.sent.push(input);
        }
        if !fin {
            return Ok(out);
        }
        if out.ends_with(&TAIL) {
            out.truncate(out.len() - TAIL.len());
        } else {
            // Nothing came out: an empty last piece after a piece that was already flushed (zlib
            // refuses a second flush in a row). The message's data must still end with an empty
            // stored block less its last four bytes (§7.2.1 steps 2-3), or the `00 00 FF FF` the
            // peer appends would be read as the start of a block: the block's first byte it is
            // (BFINAL 0, BTYPE 00, padding), from the byte boundary the last flush left.
            debug_assert!(out.is_empty(), "a sync flush that emits ends with the marker");
            out.push(0x00);
        }
        self.message_compressed();
        Ok(out)
    }

    /// The frame was encoded from `deflated` (what [`compress_fragment`](Self::compress_fragment)
    /// returned), which is kept for the next message while the compressor is held.
    pub(crate) fn reuse_deflated(&mut self, deflated: Vec<u8>) {
        if self.deflater.is_some() && deflated.capacity() <= KEEP_BUFFER_UP_TO {
            self.deflating = deflated;
        }
    }

    /// Lets go of the compressor of a message sent in pieces that will never be finished (the
    /// connection is done sending): a pooled one goes back to the pool as nobody's (whoever takes
    /// it resets it: its context is of no further use), a dedicated one is dropped.
    pub(crate) fn abandon_message(&mut self) {
        self.mid_send = false;
        self.deflating = Vec::new();
        let Some(c) = self.deflater.take() else { return };
        if let Some(pool) = &self.pool {
            give_back_deflater(pool, (self.level, self.compress_bits), c, 0);
        }
    }

    /// Inflates the next frame of a compressed whole message into the connection's own buffer
    /// (see [`inflate`](Self::inflate) for the failures); the `first` frame starts the message
    /// afresh and the `last` returns it. [`inflated_so_far`](Self::inflated_so_far) is what the
    /// frames before the last gave.
    pub(crate) fn inflate_message(
        &mut self,
        input: &[u8],
        first: bool,
        last: bool,
        limit: usize,
    ) -> Result<Option<Bytes>, ProtocolViolation> {
        if first {
            self.inflating.clear();
        }
        let mut out = std::mem::take(&mut self.inflating);
        let inflated = self.inflate(input, last, &mut out, limit);
        if inflated.is_err() || !last {
            self.inflating = out;
            return inflated.map(|()| None);
        }
        // Still held: the message was the answer to input (see `message_inflated`).
        let kept = self.inflater.is_some();
        if !kept || out.len() > COPY_UP_TO {
            return Ok(Some(Bytes::from(out)));
        }
        if self.finished.capacity() - self.finished.len() < out.len() {
            // Takes back the chunk in place when every message that shared it has been dropped.
            self.finished.reserve(FINISHED_CHUNK);
        }
        self.finished.extend_from_slice(&out);
        // Kept for the next message, unless a large compressed frame made the inflater's output
        // room grow before the message turned out small.
        if out.capacity() <= KEEP_BUFFER_UP_TO {
            out.clear();
            self.inflating = out;
        }
        Ok(Some(self.finished.split().freeze()))
    }

    /// The message being received will never be finished (the connection ended): what it
    /// inflated to so far is let go now, not when the connection is dropped.
    pub(crate) fn abandon_receive(&mut self) {
        self.inflating = Vec::new();
    }

    /// What the frames of the whole message in progress have inflated to so far.
    #[inline]
    pub(crate) fn inflated_so_far(&self) -> &[u8] {
        &self.inflating
    }

    /// Streaming takes over the whole message in progress: what it has inflated to so far.
    pub(crate) fn take_inflated_so_far(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.inflating)
    }

    /// Inflates the next piece of a compressed message into `out`; `last` restores the tail. Fails
    /// with 1009 as soon as `out` would pass `limit`, before the memory is spent, and with 1007 on
    /// data that is not deflate.
    fn inflate(
        &mut self,
        input: &[u8],
        last: bool,
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), ProtocolViolation> {
        if last && input.len() <= JOINED_TAIL_UP_TO {
            // A small last frame and its tail in one pass through the inflater: a second call
            // for four bytes cost about as much as the frame (~500 instructions of a 5,800
            // instruction echo of uWebSockets' compressed load-test message, callgrind).
            let mut joined = [0u8; JOINED_TAIL_UP_TO + TAIL.len()];
            joined[..input.len()].copy_from_slice(input);
            joined[input.len()..input.len() + TAIL.len()].copy_from_slice(&TAIL);
            self.inflate_piece(&joined[..input.len() + TAIL.len()], out, limit)?;
            self.message_inflated();
            return Ok(());
        }
        self.inflate_piece(input, out, limit)?;
        if last {
            self.inflate_piece(&TAIL, out, limit)?;
            self.message_inflated();
        }
        Ok(())
    }

    fn inflate_piece(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), ProtocolViolation> {
        let mut consumed = 0;
        loop {
            if out.len() == out.capacity() {
                let target = grow_target(out.len(), out.capacity(), input.len() - consumed, limit);
                out.reserve_exact(target - out.len());
            }
            consumed += self.inflate_some(&input[consumed..], out, 0, limit)?;
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(());
            }
        }
    }

    /// Streaming receive: inflates what it can of `input` into `out`, up to `out`'s capacity, the
    /// bound of one piece handed to the application. Returns how much of `input` it used; what it
    /// did not use is to be passed again with the next call. Call it with empty input to drain
    /// what a full `out` left inside the inflater. Fails with 1009 once the message (`so_far`
    /// bytes before this piece) would pass `limit`, and with 1007 on data that is not deflate.
    pub(crate) fn inflate_some(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        so_far: usize,
        limit: usize,
    ) -> Result<usize, ProtocolViolation> {
        let keep_history = self.pool.is_some() && !self.inflate_reset;
        self.hold_inflater()?;
        let (Some(d), received) = (&mut self.inflater, &mut self.received) else {
            return Err(ProtocolViolation::Decompression("no decompressor".into()));
        };
        let mut consumed = 0;
        loop {
            let (in_before, out_before) = (d.total_in(), out.len());
            let status = d
                .decompress_vec(&input[consumed..], out, FlushDecompress::Sync)
                .map_err(|e| ProtocolViolation::Decompression(e.to_string()))?;
            consumed += (d.total_in() - in_before) as usize;
            if keep_history {
                received.push(&out[out_before..]);
            }
            let size = so_far.saturating_add(out.len());
            if size > limit {
                return Err(ProtocolViolation::MessageTooBig {
                    size: size as u64,
                    limit,
                });
            }
            if status == Status::StreamEnd {
                // The peer ended the deflate stream (BFINAL); the next data starts a new one,
                // with no history.
                d.reset(false);
                received.clear();
            }
            if consumed == input.len() || out.len() == out.capacity() {
                return Ok(consumed);
            }
            let progressed = d.total_in() != in_before || out.len() != out_before;
            if !progressed && status != Status::StreamEnd {
                return Err(ProtocolViolation::Decompression(
                    "the compressed data stopped making progress".into(),
                ));
            }
        }
    }

    /// Streaming receive, once the last frame's payload is in: feeds the four bytes the sender
    /// removed (§7.2.2) and drains the inflater. Returns whether the message is complete; while
    /// `false`, `out` is full: hand it over and call again with a fresh one.
    pub(crate) fn inflate_finish(
        &mut self,
        out: &mut Vec<u8>,
        so_far: usize,
        limit: usize,
    ) -> Result<bool, ProtocolViolation> {
        let fed = self.inflate_some(&TAIL[self.tail_fed..], out, so_far, limit)?;
        self.tail_fed += fed;
        if self.tail_fed < TAIL.len() || out.len() == out.capacity() {
            return Ok(false);
        }
        self.tail_fed = 0;
        self.message_inflated();
        Ok(true)
    }
}

/// A connection dropped while it holds pooled states gives them back, as nobody's.
impl Drop for PerMessageDeflate {
    fn drop(&mut self) {
        if self.pool.is_some() {
            self.release_all();
        }
    }
}

/// Gives a compressor of `kind` back to `pool`, as `owner`'s (0: nobody's).
fn give_back_deflater(pool: &DeflatePool, kind: (u32, u8), c: Compress, owner: u64) {
    let lent = Lent {
        kind,
        owner,
        state: c,
    };
    give_back(&pool.shared.compressors, pool.shared.idle_limit, lent);
}

/// Gives a decompressor of `bits` back to `pool`, as `owner`'s (0: nobody's).
fn give_back_inflater(pool: &DeflatePool, bits: u8, d: Decompress, owner: u64) {
    let lent = Lent {
        kind: (0, bits),
        owner,
        state: d,
    };
    give_back(&pool.shared.decompressors, pool.shared.idle_limit, lent);
}

/// The capacity to give the inflate buffer when it is full: geometric growth (amortised copies),
/// but never past the limit plus one byte, the byte that detects excess, so a bomb cannot make us
/// allocate more; always at least one byte more than `len`. Every step saturates: the limit may be
/// `usize::MAX` ("no limit"), and `limit + 1` must then not wrap to 0, which would grow the buffer
/// one byte per call into zlib.
fn grow_target(len: usize, capacity: usize, input_len: usize, limit: usize) -> usize {
    let step = input_len.saturating_mul(4).clamp(1024, 256 << 10);
    let wanted = capacity.saturating_mul(2).max(len.saturating_add(step));
    wanted.min(limit.saturating_add(1)).max(len.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extension::offer::parse_extensions;
    use proptest::prelude::*;

    fn offer(s: &str) -> Vec<ExtensionOffer> {
        parse_extensions([s]).unwrap()
    }

    #[test]
    fn server_negotiates_each_parameter() {
        let c = DeflateConfig::default();
        let (p, r) = c
            .accept_offers(&offer("permessage-deflate; client_max_window_bits"))
            .unwrap();
        assert_eq!(r.to_string(), "permessage-deflate");
        assert_eq!((p.server_max_window_bits, p.client_max_window_bits), (15, 15));
        let (p, r) = c
            .accept_offers(&offer("permessage-deflate; server_max_window_bits=10; client_max_window_bits=9; server_no_context_takeover"))
            .unwrap();
        assert_eq!(
            r.to_string(),
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=10; client_max_window_bits=9"
        );
        assert_eq!(
            (
                p.server_max_window_bits,
                p.client_max_window_bits,
                p.server_no_context_takeover
            ),
            (10, 9, true)
        );
        // A server that wants small windows lowers them where the client allows it.
        let small = DeflateConfig {
            server_max_window_bits: 11,
            client_max_window_bits: 12,
            ..c.clone()
        };
        let (p, r) = small
            .accept_offers(&offer("permessage-deflate; client_max_window_bits"))
            .unwrap();
        assert_eq!(
            r.to_string(),
            "permessage-deflate; server_max_window_bits=11; client_max_window_bits=12"
        );
        assert_eq!((p.server_max_window_bits, p.client_max_window_bits), (11, 12));
    }

    #[test]
    fn server_declines_bad_offers_and_falls_back() {
        let c = DeflateConfig::default();
        for bad in [
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; server_max_window_bits=+10",
            "permessage-deflate; client_max_window_bits=\"+9\"",
            "permessage-deflate; client_no_context_takeover=1",
            "permessage-deflate; unknown",
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
            "x-other",
        ] {
            assert!(c.accept_offers(&offer(bad)).is_none(), "{bad}");
        }
        let (p, _) = c
            .accept_offers(&offer(
                "permessage-deflate; foo, permessage-deflate; server_max_window_bits=12",
            ))
            .unwrap();
        assert_eq!(p.server_max_window_bits, 12);
    }

    #[test]
    fn client_checks_the_response() {
        let c = DeflateConfig {
            server_max_window_bits: 12,
            ..DeflateConfig::default()
        };
        assert_eq!(
            c.client_offer().to_string(),
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits"
        );
        let ok = c
            .accept_response(
                &offer("permessage-deflate; server_max_window_bits=10; client_max_window_bits=9")[0],
            )
            .unwrap();
        assert_eq!((ok.server_max_window_bits, ok.client_max_window_bits), (10, 9));
        for bad in [
            "permessage-deflate; server_max_window_bits=13",
            "permessage-deflate",
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits",
            "permessage-deflate; server_max_window_bits=12; bogus",
            "permessage-deflate; server_max_window_bits=+12",
        ] {
            assert!(c.accept_response(&offer(bad)[0]).is_err(), "{bad}");
        }
    }

    /// Context takeover both ways, 15-bit windows: what most peers negotiate.
    const TAKEOVER_15: DeflateParams = DeflateParams {
        server_no_context_takeover: false,
        client_no_context_takeover: false,
        server_max_window_bits: 15,
        client_max_window_bits: 15,
    };

    fn pair(params: DeflateParams) -> (PerMessageDeflate, PerMessageDeflate) {
        let c = DeflateConfig {
            min_compress_size: 0,
            ..DeflateConfig::default()
        };
        (
            PerMessageDeflate::new(Role::Client, params, &c),
            PerMessageDeflate::new(Role::Server, params, &c),
        )
    }

    #[test]
    fn inflation_is_capped_before_memory_is_spent() {
        let (mut client, mut server) = pair(TAKEOVER_15);
        let bomb = client.compress(&vec![0u8; 10 << 20]).unwrap();
        assert!(
            bomb.len() < (10 << 20) / 50,
            "10 MiB of zeros compresses to {} bytes",
            bomb.len()
        );
        let mut out = Vec::new();
        let err = server.inflate(&bomb, true, &mut out, 1 << 20).unwrap_err();
        assert!(matches!(
            err,
            ProtocolViolation::MessageTooBig { limit: 1048576, .. }
        ));
        assert!(out.capacity() <= (1 << 20) + 1, "capacity {}", out.capacity());
    }

    /// Regression (issue 13): with `limit == usize::MAX`, `limit + 1` panicked in debug builds and
    /// wrapped to 0 in release, where the buffer then grew one byte per call into zlib (~50×
    /// slower).
    #[test]
    fn buffer_growth_saturates_at_an_unbounded_limit() {
        assert_eq!(grow_target(0, 0, 100, usize::MAX), 1024);
        assert_eq!(grow_target(1 << 20, 1 << 20, 10, usize::MAX), 2 << 20);
        assert_eq!(grow_target(5000, 5000, 100, usize::MAX), 10_000);
        assert_eq!(grow_target(0, 0, 1 << 20, usize::MAX), 256 << 10);
        let huge = usize::MAX / 2 + 1;
        assert_eq!(grow_target(huge, huge, usize::MAX, usize::MAX), usize::MAX);
        // A real limit still caps the buffer at one byte past it.
        assert_eq!(grow_target(0, 0, 100, 10), 11);
        assert_eq!(grow_target(11, 11, 100, 10), 12);
    }

    /// Inflating 1 MiB with no limit (`usize::MAX`) works, and as fast as with a real limit.
    #[test]
    fn inflation_without_a_limit_runs_at_full_speed() {
        let (mut client, mut server) = pair(TAKEOVER_15);
        let message: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
            .collect();
        let z = client.compress(&message).unwrap();
        let fastest = |limit: usize| {
            (0..3)
                .map(|_| {
                    let mut out = Vec::new();
                    let started = std::time::Instant::now();
                    let mut server =
                        PerMessageDeflate::new(Role::Server, TAKEOVER_15, &DeflateConfig::default());
                    server.inflate(&z, true, &mut out, limit).unwrap();
                    let took = started.elapsed();
                    assert!(out == message, "inflated {} bytes", out.len());
                    took
                })
                .min()
                .unwrap()
        };
        let bounded = fastest(64 << 20);
        let unbounded = fastest(usize::MAX);
        assert!(
            unbounded <= bounded * 4 + std::time::Duration::from_millis(20),
            "1 MiB inflated in {unbounded:?} without a limit, {bounded:?} with one"
        );
        let mut out = Vec::new();
        server.inflate(&z, true, &mut out, usize::MAX).unwrap();
        assert!(out == message);
    }

    /// A message compressed in pieces (each sync-flushed, some empty, the last one empty after a
    /// flushed piece) is, with the four bytes the receiver appends, DEFLATE data that zlib itself
    /// inflates to the pieces put together; and the next message, in the same context, too.
    #[test]
    fn pieces_inflate_with_plain_zlib_and_keep_the_context() {
        let mut sender =
            PerMessageDeflate::new(Role::Server, TAKEOVER_15, &DeflateConfig::default().pool(None));
        let mut zlib = flate2::Decompress::new_with_window_bits(false, 15);
        let mut inflate = |data: &[u8]| {
            let mut input = data.to_vec();
            input.extend_from_slice(&TAIL);
            let mut out = Vec::with_capacity(1 << 16);
            zlib.decompress_vec(&input, &mut out, flate2::FlushDecompress::Sync)
                .unwrap();
            out
        };
        let messages: [&[&[u8]]; 4] = [
            &[b"streamed piece one, ", b"", b"piece two, ", b"piece three", b""],
            &[b"whole, after the stream: piece one, piece two"],
            &[b"one piece and then nothing", b""],
            &[b"piece two, piece three", b"!"],
        ];
        for pieces in messages {
            let mut data = Vec::new();
            for (i, piece) in pieces.iter().enumerate() {
                let out = sender.compress_fragment(piece, i + 1 == pieces.len()).unwrap();
                data.extend_from_slice(&out);
            }
            assert_eq!(inflate(&data), pieces.concat(), "{pieces:?}");
        }
    }

    /// Empty messages bypass compression even with no threshold, and the compressed messages
    /// around them stay in step.
    #[test]
    fn empty_messages_are_never_compressed() {
        let (mut client, mut server) = pair(TAKEOVER_15);
        assert!(!server.should_compress(0));
        assert!(server.should_compress(1));
        for m in [&b"hello hello hello"[..], b"", b"", b"hello again, hello"] {
            if !server.should_compress(m.len()) {
                continue;
            }
            let z = server.compress(m).unwrap();
            assert!(!z.is_empty(), "a compressed payload is never empty");
            let mut out = Vec::new();
            client.inflate(&z, true, &mut out, 1 << 20).unwrap();
            assert_eq!(out, m);
        }
    }

    #[test]
    fn corrupt_data_is_a_1007_not_a_panic() {
        let (_, mut server) = pair(TAKEOVER_15);
        let mut out = Vec::new();
        let err = server
            .inflate(&[0xff, 0xff, 0xff, 0xff, 0x00], true, &mut out, 1 << 20)
            .unwrap_err();
        assert_eq!(err.close_code(), crate::CloseCode::INVALID_PAYLOAD);
    }

    /// Connections sharing one pool: `n` servers and their clients, all with context takeover.
    fn pooled(n: usize, idle_limit: usize) -> (DeflatePool, Vec<(PerMessageDeflate, PerMessageDeflate)>) {
        let pool = DeflatePool::new(idle_limit);
        let server = DeflateConfig::default()
            .min_compress_size(0)
            .pool(Some(pool.clone()));
        let client = DeflateConfig::default().min_compress_size(0);
        let pairs = (0..n)
            .map(|_| {
                (
                    PerMessageDeflate::new(Role::Client, TAKEOVER_15, &client),
                    PerMessageDeflate::new(Role::Server, TAKEOVER_15, &server),
                )
            })
            .collect();
        (pool, pairs)
    }

    /// `count` numbered words, `tag{i}:{i * mul % modulo}`: text with some repetition, different
    /// for each (tag, mul, modulo).
    fn numbered(tag: &str, count: usize, mul: usize, modulo: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|i| format!("{tag}{i}:{} ", i * mul % modulo).into_bytes())
            .collect()
    }

    fn json(i: usize) -> Vec<u8> {
        format!(r#"{{"id":{i},"user":"someone","text":"the same words again and again","tags":["a","b"]}}"#)
            .repeat(12)
            .into_bytes()
    }

    /// An idle pooled connection (one that waited for input: `release_idle`) holds no zlib
    /// state, only the text of its contexts; the pool holds one state per direction for all of
    /// them.
    #[test]
    fn idle_pooled_connections_hold_no_zlib_state() {
        let (pool, mut pairs) = pooled(50, 8);
        for (i, (client, server)) in pairs.iter_mut().enumerate() {
            server.note_input();
            let mut out = Vec::new();
            server
                .inflate(&client.compress(&json(i)).unwrap(), true, &mut out, 1 << 20)
                .unwrap();
            assert_eq!(out, json(i));
            let z = server.compress(&json(i)).unwrap();
            let mut back = Vec::new();
            client.inflate(&z, true, &mut back, 1 << 20).unwrap();
            assert_eq!(back, json(i));
            assert!(
                server.deflater.is_some() && server.inflater.is_some(),
                "held while busy"
            );
            assert_eq!(pool.held(), (1, 1));
            server.release_idle();
            assert!(server.deflater.is_none() && server.inflater.is_none());
            assert_eq!(pool.held(), (0, 0));
            assert_eq!(
                (server.sent.bytes.len(), server.received.bytes.len()),
                (json(i).len(), json(i).len())
            );
        }
        // Messages one at a time: the same state went round every connection.
        assert_eq!(pool.idle(), (1, 1));
    }

    /// A connection whose pooled state was lent to another in between still compresses against
    /// its own last message (the state is re-primed), and the peer decodes every message. Each
    /// connection waits for input (gives its states back) after every exchange.
    #[test]
    fn context_survives_a_lent_state() {
        let (pool, mut pairs) = pooled(2, 1);
        let message = numbered("", 300, 7919, 1000);
        let mut sizes = Vec::new();
        for round in 0..4 {
            for (client, server) in pairs.iter_mut() {
                let z = server.compress(&message).unwrap();
                if round > 0 {
                    sizes.push(z.len());
                }
                let mut out = Vec::new();
                client.inflate(&z, true, &mut out, 1 << 20).unwrap();
                assert_eq!(out, message);
                let z = client.compress(&message).unwrap();
                let mut out = Vec::new();
                server.inflate(&z, true, &mut out, 1 << 20).unwrap();
                assert_eq!(out, message);
                server.release_idle();
            }
        }
        let first = PerMessageDeflate::new(Role::Server, TAKEOVER_15, &DeflateConfig::default())
            .compress(&message)
            .unwrap()
            .len();
        // A repeat of the last message is a few back-references, not a fresh compression.
        assert!(
            sizes.iter().all(|&s| s * 10 < first),
            "{sizes:?} vs {first} bytes from scratch"
        );
        assert_eq!(pool.idle(), (1, 1));
    }

    /// One exchange on a pair: the client sends `m`, the server echoes it, both decode it.
    fn exchange(client: &mut PerMessageDeflate, server: &mut PerMessageDeflate, m: &[u8]) -> usize {
        // Input arrived: the server is busy (it starts waiting).
        server.note_input();
        let mut out = Vec::new();
        server
            .inflate(&client.compress(m).unwrap(), true, &mut out, 1 << 20)
            .unwrap();
        assert_eq!(out, m);
        let z = server.compress(m).unwrap();
        let mut back = Vec::new();
        client.inflate(&z, true, &mut back, 1 << 20).unwrap();
        assert_eq!(back, m);
        z.len()
    }

    /// A busy pooled connection (no wait for input between its messages) borrows once per
    /// direction and keeps its states: no pool round trip, no reset, no priming per message.
    /// Once it waits, it gives them back; its next message gets them back, context intact.
    #[test]
    fn a_busy_connection_keeps_its_states_and_gives_them_back_when_idle() {
        let (pool, mut pairs) = pooled(1, 8);
        let (client, server) = &mut pairs[0];
        for i in 0..100 {
            exchange(client, server, &json(i % 3));
            assert_eq!(pool.borrows(), (1, 1), "message {i}: no borrow per message");
            assert_eq!((pool.held(), pool.idle()), ((1, 1), (0, 0)));
        }
        server.release_idle();
        assert_eq!((pool.held(), pool.idle()), ((0, 0), (1, 1)));
        // The same states come back, context intact: the next message is a few
        // back-references, far shorter than from scratch.
        let fresh = PerMessageDeflate::new(Role::Server, TAKEOVER_15, &DeflateConfig::default().pool(None))
            .compress(&json(1))
            .unwrap()
            .len();
        let again = exchange(client, server, &json(1));
        assert!(again * 4 < fresh, "{again} vs {fresh} bytes from scratch");
        assert_eq!(pool.borrows(), (2, 2));
    }

    /// A state held by a connection is never lent to another: a second connection, busy at the
    /// same time, gets a state of its own, and each keeps compressing against its own context.
    #[test]
    fn a_held_state_is_never_lent_to_another_connection() {
        let (pool, mut pairs) = pooled(2, 8);
        let (a, b) = (numbered("a", 400, 31, 97), numbered("b", 400, 17, 89));
        let (first, rest) = pairs.split_at_mut(1);
        let ((ca, sa), (cb, sb)) = (&mut first[0], &mut rest[0]);
        let fresh = exchange(ca, sa, &a);
        exchange(cb, sb, &b);
        assert_eq!(pool.held(), (2, 2), "each busy connection holds its own");
        assert_eq!(pool.idle(), (0, 0));
        for _ in 0..3 {
            assert!(exchange(ca, sa, &a) * 10 < fresh);
            assert!(exchange(cb, sb, &b) * 10 < fresh);
        }
        // A waits; B stays busy and keeps its own; A's next message gets A's states back.
        sa.release_idle();
        assert_eq!((pool.held(), pool.idle()), ((1, 1), (1, 1)));
        assert!(exchange(cb, sb, &b) * 10 < fresh);
        assert!(exchange(ca, sa, &a) * 10 < fresh);
        assert_eq!(pool.borrows(), (3, 3));
    }

    /// A message sent while the connection waits for input (a push: no input since its last
    /// wait) gives its compressor back when it ends, as there may be no wait to give it back
    /// at; input makes the connection busy again, and it keeps its states.
    #[test]
    fn a_push_while_waiting_gives_the_compressor_back_at_once() {
        let (pool, mut pairs) = pooled(1, 8);
        let (client, server) = &mut pairs[0];
        exchange(client, server, &json(1));
        server.release_idle();
        for i in 0..3 {
            let z = server.compress(&json(i)).unwrap();
            let mut out = Vec::new();
            client.inflate(&z, true, &mut out, 1 << 20).unwrap();
            assert_eq!(out, json(i));
            assert!(server.deflater.is_none(), "push {i}");
            assert_eq!((pool.held(), pool.idle()), ((0, 0), (1, 1)));
        }
        server.note_input();
        exchange(client, server, &json(2));
        exchange(client, server, &json(3));
        assert!(server.deflater.is_some() && server.inflater.is_some());
        assert_eq!(
            pool.borrows(),
            (5, 2),
            "1 + 3 pushes + 1 busy spell; inflater: 2 spells"
        );
    }

    /// A connection in the middle of a message keeps its state through a wait for input: the
    /// message's context is not the connection's between messages.
    #[test]
    fn a_message_in_progress_keeps_its_state_through_a_wait() {
        let (pool, mut pairs) = pooled(1, 8);
        let (client, server) = &mut pairs[0];
        let first = server.compress_fragment(b"the first piece, ", false).unwrap();
        server.release_idle();
        assert!(server.deflater.is_some());
        let last = server.compress_fragment(b"and the last piece", true).unwrap();
        let z = client.compress(&json(1)).unwrap();
        let mut out = Vec::new();
        server
            .inflate(&z[..z.len() / 2], false, &mut out, 1 << 20)
            .unwrap();
        server.release_idle();
        assert!(server.inflater.is_some() && server.deflater.is_none());
        assert_eq!(pool.held(), (0, 1));
        server
            .inflate(&z[z.len() / 2..], true, &mut out, 1 << 20)
            .unwrap();
        assert_eq!(out, json(1));
        server.release_idle();
        assert_eq!((pool.held(), pool.idle()), ((0, 0), (1, 1)));
        let mut text = Vec::new();
        client.inflate(&first, false, &mut text, 1 << 20).unwrap();
        client.inflate(&last, true, &mut text, 1 << 20).unwrap();
        assert_eq!(text, b"the first piece, and the last piece");
    }

    /// The pool counts what busy connections hold apart from what it keeps idle (at most the
    /// limit); a connection dropped while holding gives its states back, as nobody's.
    #[test]
    fn held_states_are_counted_and_given_back_when_dropped() {
        let (pool, mut pairs) = pooled(3, 2);
        for (i, (client, server)) in pairs.iter_mut().enumerate() {
            exchange(client, server, &json(i));
        }
        assert_eq!((pool.held(), pool.idle()), ((3, 3), (0, 0)));
        pairs[0].1.release_idle();
        pairs[1].1.release_idle();
        assert_eq!((pool.held(), pool.idle()), ((1, 1), (2, 2)));
        drop(pairs.pop());
        assert_eq!((pool.held(), pool.idle()), ((0, 0), (2, 2)), "the limit: 2 idle");
        assert_eq!(pool.borrows(), (3, 3));
    }

    /// Dedicated states (no pool) are kept between messages, as before pooling.
    #[test]
    fn dedicated_states_are_kept() {
        let config = DeflateConfig::default().pool(None);
        let mut server = PerMessageDeflate::new(Role::Server, TAKEOVER_15, &config);
        let mut client = PerMessageDeflate::new(Role::Client, TAKEOVER_15, &config);
        let z = server.compress(&json(1)).unwrap();
        let mut out = Vec::new();
        client.inflate(&z, true, &mut out, 1 << 20).unwrap();
        assert!(server.deflater.is_some() && client.inflater.is_some());
        assert!(server.sent.bytes.is_empty() && client.received.bytes.is_empty());
    }

    /// The history keeps exactly the last window of what went through, whatever the sizes.
    #[test]
    fn history_keeps_the_last_window() {
        let mut h = History::new(9);
        let mut all = Vec::new();
        for (i, len) in [0usize, 100, 300, 200, 512, 700, 1, 511, 3]
            .into_iter()
            .enumerate()
        {
            let data: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            h.push(&data);
            all.extend_from_slice(&data);
            let want = &all[all.len().saturating_sub(512)..];
            assert_eq!(h.contiguous(), want);
            assert!(h.bytes.capacity() <= 1024, "capacity {}", h.bytes.capacity());
        }
    }

    proptest! {
        /// Connections sharing a small pool, messages interleaved in random order, in both
        /// directions and with random pieces: every message decodes to what was sent.
        #[test]
        fn interleaved_pooled_connections_round_trip(
            order in proptest::collection::vec((0usize..4, any::<bool>(), 1usize..3000, any::<prop::sample::Index>()), 1..40),
            idle_limit in 0usize..3,
        ) {
            let (_pool, mut pairs) = pooled(4, idle_limit);
            for (n, (who, to_client, len, cut)) in order.into_iter().enumerate() {
                // The connection that waited for input gives its states back: the others' next
                // message may get them.
                if n % 3 == 2 {
                    let (client, server) = &mut pairs[(who + 1) % 4];
                    client.release_idle();
                    server.release_idle();
                }
                let message: Vec<u8> = json(n).into_iter().cycle().skip(n * 13).take(len).collect();
                let (client, server) = &mut pairs[who];
                let (from, to) = if to_client { (server, client) } else { (client, server) };
                let z = from.compress(&message).unwrap();
                let at = cut.index(z.len() + 1);
                let mut out = Vec::new();
                to.inflate(&z[..at], false, &mut out, 1 << 20).unwrap();
                to.inflate(&z[at..], true, &mut out, 1 << 20).unwrap();
                prop_assert_eq!(out, message);
            }
        }
    }

    proptest! {
        /// The history keeps exactly the last window of what went through, read at any point.
        #[test]
        fn history_matches_the_last_window_of_everything_pushed(
            pushes in proptest::collection::vec((0usize..700, any::<bool>()), 1..30),
        ) {
            let mut h = History::new(9);
            let mut all = Vec::new();
            for (i, (len, read)) in pushes.into_iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|j| (i * 131 + j * 7) as u8).collect();
                h.push(&data);
                all.extend_from_slice(&data);
                if read {
                    let want = &all[all.len().saturating_sub(512)..];
                    prop_assert_eq!(h.contiguous(), want);
                }
                prop_assert_eq!(h.bytes.len(), all.len().min(512));
                prop_assert!(h.bytes.capacity() <= 1024);
            }
        }
    }

    proptest! {
        /// Pooled connections busy and idle at random (a wait for input after some messages):
        /// every message decodes to what was sent, and a connection holds a state only while
        /// busy.
        #[test]
        fn busy_and_idle_pooled_connections_round_trip(
            order in proptest::collection::vec((0usize..3, any::<bool>(), 1usize..2000, any::<bool>()), 1..40),
            idle_limit in 0usize..3,
        ) {
            let (pool, mut pairs) = pooled(3, idle_limit);
            for (n, (who, to_client, len, waits)) in order.into_iter().enumerate() {
                let message: Vec<u8> = json(n).into_iter().cycle().skip(n * 7).take(len).collect();
                let (client, server) = &mut pairs[who];
                let (from, to) = if to_client { (&mut *server, &mut *client) } else { (&mut *client, &mut *server) };
                let z = from.compress(&message).unwrap();
                let mut out = Vec::new();
                to.note_input();
                to.inflate(&z, true, &mut out, 1 << 20).unwrap();
                prop_assert_eq!(out, message);
                if waits {
                    server.release_idle();
                    prop_assert!(server.deflater.is_none() && server.inflater.is_none());
                }
            }
            let held = pairs.iter().filter(|(_, s)| s.deflater.is_some()).count();
            prop_assert_eq!(pool.held().0, held);
            prop_assert!(pool.idle().0 <= idle_limit);
        }
    }

    proptest! {
        /// Compress → inflate round-trips for random messages, random negotiated parameters, and
        /// the compressed bytes split into pieces at random points (as frames would be).
        #[test]
        fn round_trip(
            messages in proptest::collection::vec(proptest::collection::vec(0u8..8, 0..3000), 1..6),
            snct in any::<bool>(), cnct in any::<bool>(), sbits in 9u8..16, cbits in 9u8..16,
            cut in any::<prop::sample::Index>(),
        ) {
            let params = DeflateParams { server_no_context_takeover: snct, client_no_context_takeover: cnct, server_max_window_bits: sbits, client_max_window_bits: cbits };
            let (mut client, mut server) = pair(params);
            // Empty messages go uncompressed (`should_compress`), as the connection sends them.
            for m in messages.iter().filter(|m| !m.is_empty()) {
                let z = client.compress(m).unwrap();
                let at = cut.index(z.len() + 1);
                let mut out = Vec::new();
                server.inflate(&z[..at], false, &mut out, 1 << 20).unwrap();
                server.inflate(&z[at..], true, &mut out, 1 << 20).unwrap();
                prop_assert_eq!(&out, m);
                let z = server.compress(m).unwrap();
                let mut out = Vec::new();
                client.inflate(&z, true, &mut out, 1 << 20).unwrap();
                prop_assert_eq!(&out, m);
            }
        }

        /// Arbitrary input inflates, or fails as undecodable (1007) or too big (1009): never a
        /// panic, never past the limit.
        #[test]
        fn truncated_or_corrupt_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (_, mut server) = pair(TAKEOVER_15);
            let mut out = Vec::new();
            match server.inflate(&data, true, &mut out, 1 << 16) {
                Ok(()) => prop_assert!(out.len() <= 1 << 16),
                Err(ProtocolViolation::Decompression(_)) => {}
                Err(ProtocolViolation::MessageTooBig { limit, .. }) => prop_assert_eq!(limit, 1 << 16),
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
