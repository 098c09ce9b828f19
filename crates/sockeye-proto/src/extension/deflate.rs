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
//! **Memory.** The compressor and decompressor are allocated on the first compressed message in
//! each direction, so connections that never exchange a compressed message cost nothing. After
//! one message each way a server connection holds about 420 KiB with window bits 15 and context
//! takeover (the default), about 310 KiB with 12 bits (`bench/deflate-backends`, `deflate-memory`).
//! Without context takeover nothing is kept between messages, so the state is freed after each
//! one: such connections hold no compression memory while idle.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::ExtensionOffer;
use crate::connection::Role;
use crate::error::ProtocolViolation;

/// The extension's registered name.
pub const NAME: &str = "permessage-deflate";

/// What this endpoint asks for, or accepts, when negotiating permessage-deflate.
///
/// The names follow RFC 7692 §7.1: "server" parameters govern what the server compresses,
/// "client" parameters what the client compresses.
#[derive(Debug, Clone, PartialEq, Eq)]
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
        }
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
    deflater: Option<Compress>,
    inflater: Option<Decompress>,
    /// Streaming receive: how much of the message's tail (§7.2.2) has been fed to the inflater.
    tail_fed: usize,
}

impl std::fmt::Debug for PerMessageDeflate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerMessageDeflate")
            .field("compress_bits", &self.compress_bits)
            .field("inflate_bits", &self.inflate_bits)
            .finish_non_exhaustive()
    }
}

/// The four bytes a sync flush ends with, removed by the sender and restored by the receiver (§7.2).
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

impl PerMessageDeflate {
    /// The state for `role` after agreeing on `params`.
    pub fn new(role: Role, params: DeflateParams, config: &DeflateConfig) -> Self {
        let server = (params.server_max_window_bits, params.server_no_context_takeover);
        let client = (params.client_max_window_bits, params.client_no_context_takeover);
        let (ours, theirs) = match role {
            Role::Server => (server, client),
            Role::Client => (client, server),
        };
        PerMessageDeflate {
            level: config.level.min(9),
            min_compress_size: config.min_compress_size,
            compress_bits: ours.0,
            compress_reset: ours.1,
            inflate_bits: theirs.0,
            inflate_reset: theirs.1,
            deflater: None,
            inflater: None,
            tail_fed: 0,
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

    /// Compresses one whole message (§7.2.1): sync flush, then drop the trailing `00 00 FF FF`.
    ///
    /// `input` is never empty: the connection compresses only what
    /// [`should_compress`](Self::should_compress) accepts, and that refuses empty messages, which
    /// then cost no payload at all. (A compressor that has just sync-flushed emits nothing for
    /// empty input, and an empty payload with RSV1 is not DEFLATE data.)
    pub(crate) fn compress(&mut self, input: &[u8]) -> Result<Vec<u8>, String> {
        debug_assert!(!input.is_empty(), "empty messages are sent uncompressed");
        let (level, bits) = (self.level, self.compress_bits);
        let c = self
            .deflater
            .get_or_insert_with(|| Compress::new_with_window_bits(Compression::new(level), false, bits));
        let mut out = Vec::with_capacity(input.len() / 2 + 64);
        let start = c.total_in();
        loop {
            let consumed = (c.total_in() - start) as usize;
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(64));
            }
            c.compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| e.to_string())?;
            // Done when all input is in and the flush left room to spare.
            if (c.total_in() - start) as usize == input.len() && out.len() < out.capacity() {
                break;
            }
        }
        if out.ends_with(&TAIL) {
            out.truncate(out.len() - TAIL.len());
        }
        if self.compress_reset {
            // Nothing carries over to the next message: free the state until then.
            self.deflater = None;
        }
        Ok(out)
    }

    /// Inflates the next piece of a compressed message into `out`; `last` restores the tail. Fails
    /// with 1009 as soon as `out` would pass `limit`, before the memory is spent, and with 1007 on
    /// data that is not deflate.
    pub(crate) fn inflate(
        &mut self,
        input: &[u8],
        last: bool,
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), ProtocolViolation> {
        self.inflate_piece(input, out, limit)?;
        if last {
            self.inflate_piece(&TAIL, out, limit)?;
            if self.inflate_reset {
                self.inflater = None;
            }
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
        let bits = self.inflate_bits.max(9);
        let d = self
            .inflater
            .get_or_insert_with(|| Decompress::new_with_window_bits(false, bits));
        let mut consumed = 0;
        loop {
            let (in_before, out_before) = (d.total_in(), out.len());
            let status = d
                .decompress_vec(&input[consumed..], out, FlushDecompress::Sync)
                .map_err(|e| ProtocolViolation::Decompression(e.to_string()))?;
            consumed += (d.total_in() - in_before) as usize;
            let size = so_far.saturating_add(out.len());
            if size > limit {
                return Err(ProtocolViolation::MessageTooBig {
                    size: size as u64,
                    limit,
                });
            }
            if status == Status::StreamEnd {
                // The peer ended the deflate stream (BFINAL); the next data starts a new one.
                d.reset(false);
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
        if self.inflate_reset {
            self.inflater = None;
        }
        Ok(true)
    }
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
    use crate::extension::parse_extensions;
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
