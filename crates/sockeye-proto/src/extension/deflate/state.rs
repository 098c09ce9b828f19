//! [`PerMessageDeflate`], one connection's compression state: what was agreed, and when it holds
//! a compressor and a decompressor: borrowed from the pool at the first message after a wait for
//! input, kept while busy or lingering, given back when it waits (see the [module docs](super)).
//! The compressing and inflating themselves are in `codec.rs`.

use std::time::Duration;

use bytes::BytesMut;
use flate2::{Compress, Compression, Decompress};

use super::config::DeflateConfig;
use super::history::History;
use super::negotiation::DeflateParams;
use super::pool::{Borrowed, DeflatePool, borrow, give_back_deflater, give_back_inflater};
use crate::error::ProtocolViolation;
use crate::role::Role;

/// The compression state of one connection.
pub struct PerMessageDeflate {
    pub(super) level: u32,
    pub(super) min_compress_size: usize,
    pub(super) compress_bits: u8,
    pub(super) compress_reset: bool,
    pub(super) inflate_bits: u8,
    pub(super) inflate_reset: bool,
    /// Dedicated: kept between messages (with context takeover). Pooled: held from the first
    /// message after a wait for input to [`release_idle`](Self::release_idle).
    pub(super) deflater: Option<Compress>,
    pub(super) inflater: Option<Decompress>,
    /// A message is being compressed (sent in pieces), or its compression failed: the deflater
    /// holds a context that is not the connection's between messages.
    pub(super) mid_send: bool,
    /// A message is being inflated (or its inflation failed): the same for the inflater.
    pub(super) mid_receive: bool,
    /// Pooled: no input has arrived since the connection last waited for input (or since it was
    /// made: a connection starts waiting), so it holds no state between messages: a message sent
    /// (a push) or inflated now gives its state back when it ends. There may never be a wait to
    /// give it back at: a connection that only pushes never waits for input.
    pub(super) waiting: bool,
    /// `None`: dedicated states. `Some`: borrowed per message, as `owner`.
    pub(super) pool: Option<DeflatePool>,
    pub(super) owner: u64,
    /// Pooled: how long a wait for input keeps the states ([`DeflateConfig::linger`]).
    pub(super) linger: Duration,
    /// Pooled: states were given back at a wait at least once: a connection that then borrows
    /// again lingers (see [`linger`](Self::linger)).
    pub(super) gave_back: bool,
    /// Pooled with context takeover: the text our compression context covers, and the peer's.
    pub(super) sent: History,
    pub(super) received: History,
    /// Streaming receive: how much of the message's tail (§7.2.2) has been fed to the inflater.
    pub(super) tail_fed: usize,
    /// What a message is compressed into, when it comes back after the frame was encoded from it
    /// ([`reuse_deflated`](Self::reuse_deflated)): kept while the compressor is held, so a busy
    /// connection's compressed sends allocate nothing per message.
    pub(super) deflating: Vec<u8>,
    /// Whole messages ([`inflate_message`](Self::inflate_message)): what the message in progress
    /// has inflated to so far, a buffer reused from message to message.
    pub(super) inflating: Vec<u8>,
    /// Whole messages of up to [`COPY_UP_TO`](super::codec::COPY_UP_TO) bytes are copied here and leave as a `Bytes` that
    /// shares it: a busy connection allocates once per [`FINISHED_CHUNK`](super::codec::FINISHED_CHUNK), not twice per message
    /// (the message's buffer and the `Bytes`' shared header, ~290 of a 5,100-instruction echo of
    /// a small compressed message, callgrind). Both buffers are held with the inflater and let
    /// go with it: a pooled connection keeps neither while it waits; dedicated states (~300 KiB)
    /// keep them (~5 KiB) as they keep the states.
    pub(super) finished: BytesMut,
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

    /// The owner a state is given back under: nobody for a context that is not kept.
    fn owner_for(&self, reset: bool) -> u64 {
        if reset { 0 } else { self.owner }
    }

    /// A compressor from the pool (or a new one), primed with our context when it is not ours.
    #[cold]
    pub(super) fn borrow_deflater(&mut self) -> Result<Compress, String> {
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
    pub(super) fn return_deflater(&mut self) -> bool {
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
    pub(super) fn return_inflater(&mut self) -> bool {
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
    pub(super) fn drop_message_buffers(&mut self) {
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

    /// A decompressor from the pool (or a new one), primed with the peer's context when it is
    /// not ours.
    #[cold]
    pub(super) fn borrow_inflater(&mut self) -> Result<(), ProtocolViolation> {
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
}

/// A connection dropped while it holds pooled states gives them back, as nobody's.
impl Drop for PerMessageDeflate {
    fn drop(&mut self) {
        if self.pool.is_some() {
            self.release_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extension::deflate::negotiation::TAKEOVER_15;
    use proptest::prelude::*;

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
}
