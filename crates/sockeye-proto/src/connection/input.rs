//! The receiving half of [`Connection`]'s API: bytes in, messages (or pieces of them) out, and the
//! peer's end of the transport. The receiving room does the parsing; the front answers what it
//! hands over that concerns the other rooms: a ping (a pong to send) and a close (the closing
//! handshake), and fails the connection on the violations it reports.

use bytes::{Bytes, BytesMut};

use crate::error::Error;
use crate::frame::{CloseCode, CloseFrame};
use crate::message::{Incoming, Message};

use super::assembly::whole_as_piece;
use super::close::{Transport, after_close_handshake};
use super::front::Connection;
use super::receive::Part;

impl Connection {
    /// Appends bytes received from the peer. Then call [`poll_message`](Self::poll_message) until it
    /// returns `Ok(None)`.
    pub fn receive(&mut self, bytes: &[u8]) {
        self.receiver.receive(bytes);
        self.note_input();
    }

    /// The buffer that received bytes are appended to: an I/O layer can read from the socket straight
    /// into it instead of calling [`receive`](Self::receive). Only append to it, then call
    /// [`note_input`](Self::note_input).
    pub fn read_buffer(&mut self) -> &mut BytesMut {
        self.receiver.read_buffer()
    }

    /// How many bytes of the frame being received have yet to arrive (0 between frames). A
    /// frame received whole gets room for all of it in the read buffer up front; an I/O layer
    /// that reads into [`read_buffer`](Self::read_buffer) should fill that room rather than
    /// reserve more, which would copy the frame into a larger allocation.
    pub fn frame_bytes_missing(&self) -> usize {
        self.receiver.frame_bytes_missing()
    }

    /// Gives up the read buffer and the outbound batch buffer when they are empty, and the
    /// permessage-deflate states borrowed from a [`DeflatePool`](crate::extension::deflate::DeflatePool)
    /// (between messages: a message in progress keeps its state), so that a connection waiting
    /// for input holds no buffer memory and no zlib state; the next read or send allocates (or
    /// borrows) again. An I/O layer calls it every time the connection is about to wait — for
    /// input, for the transport to take output, or with all its output written and nothing
    /// buffered to read (see [`Connection`]'s "Waits" for what leaks otherwise): with thousands
    /// of mostly quiet connections, memory then follows the busy ones, not every connection's
    /// largest message. Between two calls a busy connection keeps its compressor and decompressor:
    /// no pool round trip per message.
    ///
    /// Returns the read buffer, empty, when it has room for `reuse` bytes, taking back the room
    /// of messages already let go if it must: the I/O layer may keep it for the next read of any
    /// connection (a pool), so that a busy connection pays no allocation per wait. A buffer
    /// without that room is simply let go. Room is taken back only when it runs short, not at
    /// every wait (~50 instructions of a 64-byte echo, callgrind).
    pub fn release_idle_buffers(&mut self, reuse: usize) -> Option<BytesMut> {
        self.release_idle_write_buffer();
        self.release_idle_deflate();
        self.receiver.release_read_buffer(reuse)
    }

    /// Gives the permessage-deflate states borrowed from a
    /// [`DeflatePool`](crate::extension::deflate::DeflatePool) back to it (a message in progress
    /// keeps its state): the part of [`release_idle_buffers`](Self::release_idle_buffers) for an
    /// I/O layer that keeps the read buffer through a wait, or that waits for the transport to
    /// take output. A waiting connection holds no zlib state; between two waits it keeps them,
    /// whatever the number of messages (see [`Connection`]'s "Waits").
    #[inline]
    pub fn release_idle_deflate(&mut self) {
        if let Some(d) = &mut self.deflate {
            d.release_idle();
            self.timers.stop_linger();
        }
    }

    /// [`release_idle_deflate`](Self::release_idle_deflate) for a wait for input through which
    /// the I/O layer runs the engine's timer ([`poll_timeout`](Self::poll_timeout) /
    /// [`handle_timeout`](Self::handle_timeout)): pooled states stay held for
    /// [`DeflateConfig::linger`](crate::extension::deflate::DeflateConfig::linger) and go back at
    /// the first `handle_timeout` after a whole linger without input, so that a connection whose
    /// messages come a few milliseconds apart keeps its context instead of being reset and
    /// re-primed at every message (issue 31). Call it before looking at `poll_timeout`: it may
    /// start a deadline. Only where the timer does run through the wait: a wait the I/O layer
    /// may never come back from (an application that only sends, done writing) calls
    /// `release_idle_deflate`.
    #[inline]
    pub fn linger_deflate(&mut self) {
        if let Some(d) = &mut self.deflate {
            match d.linger() {
                Some(linger) => {
                    d.start_waiting();
                    self.timers.start_linger(linger);
                }
                None => d.release_idle(),
            }
        }
    }

    /// The read-buffer part of [`release_idle_buffers`](Self::release_idle_buffers), for an I/O
    /// layer that gives the deflate states back (or lets them linger) on its own: the read buffer,
    /// empty, when it has room for `reuse` bytes, else `None` (see `release_idle_buffers`).
    #[inline]
    pub fn release_idle_read_buffer(&mut self, reuse: usize) -> Option<BytesMut> {
        self.receiver.release_read_buffer(reuse)
    }

    /// Gives up the outbound batch buffer when it is empty and grew for a large batch, and the
    /// queue of shared frames when it is empty: the half of
    /// [`release_idle_buffers`](Self::release_idle_buffers) for an I/O layer that keeps the read
    /// buffer through a wait (with [`release_idle_deflate`](Self::release_idle_deflate)).
    #[inline]
    pub fn release_idle_write_buffer(&mut self) {
        self.sender.transmit().release_if_empty();
    }

    /// How many data messages, or pieces of them ([`poll_chunk`](Self::poll_chunk)), this
    /// connection has handed out: a count that only grows. An I/O layer compares it between two
    /// points to learn whether data went to the application in between, at no cost per message
    /// to itself (sockeye's read buffer is kept through waits only by connections that receive
    /// data).
    #[inline]
    pub fn data_delivered(&self) -> u64 {
        self.receiver.data_delivered()
    }

    /// How many received bytes are buffered and not yet turned into messages.
    pub fn buffered(&self) -> usize {
        self.receiver.buffered()
    }

    /// The peer closed the transport (TCP FIN). Returns the close code to report: `None` when the
    /// closing handshake had finished, else 1006, "closed abnormally" (§7.1.5), also kept as
    /// [`Error::AbnormalClosure`]. Either way the transport is to be closed now
    /// ([`Transport::Finish`]).
    pub fn receive_eof(&mut self) -> Option<CloseCode> {
        if self.closing.transport() == Transport::Closed {
            return None;
        }
        // A peer that closed first and then the transport, before our answer, closed cleanly.
        let abnormal = !self.closing.is_closed() && self.closing.take_reply_owed().is_none();
        if abnormal {
            self.closing.keep_error(|| Error::AbnormalClosure);
        }
        // Anything queued (a close frame) may still reach a peer that only half-closed; the close
        // deadline bounds the wait.
        self.timers.start_close_deadline(self.config.close_timeout);
        self.end(Transport::Finish);
        abnormal.then_some(CloseCode::ABNORMAL)
    }

    /// Parses buffered bytes and returns the next message, or `Ok(None)` when more bytes are needed
    /// (or the connection is closed).
    ///
    /// A message's bytes share an allocation with the messages around it (an uncompressed one
    /// is a slice of the read buffer; a small inflated one, of a 4 KiB buffer the connection
    /// inflates into): no allocation per message. A message kept for long keeps that allocation
    /// alive; copy it (`Bytes::copy_from_slice`) to keep only its own bytes.
    ///
    /// On `Err(Error::Protocol(_))` the peer broke the protocol and the connection has failed
    /// (§7.1.7): a close frame with the matching code has been queued, nothing more from the peer
    /// is processed, and [`transport`](Self::transport) asks to shut down writing once the close
    /// frame is written. The error is kept for [`take_error`](Self::take_error) too.
    #[inline]
    pub fn poll_message(&mut self) -> Result<Option<Message>, Error> {
        if self.receiver.is_idle() {
            // Nothing to parse (an I/O layer asks before every wait, and again once woken):
            // what `poll_part` would find, checked inline in the caller, before the parser's
            // own set-up (~80 instructions of a 64-byte echo, then ~40 more, callgrind).
            return Ok(None);
        }
        self.poll_buffered_message()
    }

    /// [`poll_message`](Self::poll_message) with bytes to parse.
    fn poll_buffered_message(&mut self) -> Result<Option<Message>, Error> {
        if let Some(message) = self.poll_short_message() {
            return Ok(Some(message));
        }
        if self.receiver.is_streaming() {
            return Err(Error::InvalidInput(
                "a message is being received in pieces: take the rest with poll_chunk",
            ));
        }
        match self.poll_part(false)? {
            Some(Incoming::Control(message)) => Ok(Some(message)),
            // Whole-message mode hands over data messages as `Control(Message::Text|Binary)`
            // (see `poll_part`); it never cuts pieces.
            Some(Incoming::Chunk(_)) | None => Ok(None),
        }
    }

    /// Parses buffered bytes and returns what comes next, a data message as pieces: a piece as
    /// soon as any of its bytes have arrived (see [`MessageChunk`](crate::MessageChunk)), or a
    /// control frame whole. `Ok(None)` when more bytes are needed (or the connection is closed).
    /// Memory stays bounded whatever the message size: the read buffer holds at most what the
    /// I/O layer read, and a compressed message is inflated 64 KiB at a time. Errors as for
    /// [`poll_message`](Self::poll_message).
    ///
    /// The two may be mixed between messages; a message begun with `poll_message` (fragments
    /// gathered so far) continues here, the gathered part as its first piece; one begun here must
    /// be finished here (`poll_message` refuses with [`Error::InvalidInput`] until then).
    ///
    /// ```
    /// use sockeye_proto::{Config, Connection, Incoming};
    ///
    /// let mut server = Connection::server(Config::default());
    /// // The first half of a masked "Hello" (RFC 6455 §5.7), then the rest.
    /// let frame = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
    /// server.receive(&frame[..8]);
    /// let Some(Incoming::Chunk(first)) = server.poll_chunk().unwrap() else { panic!() };
    /// assert_eq!((&first.data[..], first.first, first.last), (&b"He"[..], true, false));
    /// assert_eq!(server.poll_chunk().unwrap(), None);
    /// server.receive(&frame[8..]);
    /// let Some(Incoming::Chunk(rest)) = server.poll_chunk().unwrap() else { panic!() };
    /// assert_eq!((&rest.data[..], rest.first, rest.last), (&b"llo"[..], false, true));
    /// ```
    pub fn poll_chunk(&mut self) -> Result<Option<Incoming>, Error> {
        if self.receiver.between_messages()
            && let Some(message) = self.poll_short_message()
        {
            return Ok(Some(whole_as_piece(message)));
        }
        Ok(self.poll_part(true)?.map(|part| match part {
            Incoming::Control(message) => whole_as_piece(message),
            chunk => chunk,
        }))
    }

    /// The hot case of both modes in one step (see `Receiver::poll_short_message`).
    #[inline]
    fn poll_short_message(&mut self) -> Option<Message> {
        if !self.closing.is_open() {
            return None;
        }
        self.receiver.poll_short_message(&self.config)
    }

    /// The receive path of both modes: whole messages come out as `Control(Message)` (of any
    /// kind), streamed pieces as `Chunk`.
    fn poll_part(&mut self, streaming: bool) -> Result<Option<Incoming>, Error> {
        if !self.closing.reads_input() {
            // §7.1.7: after failing, and after the closing handshake, input is not processed
            // (nor after the peer's close, which nothing may follow, §5.5.1).
            // Drop it as it arrives, so that a peer that keeps sending costs no memory.
            self.receiver.discard_input();
            return Ok(None);
        }
        let part = self
            .receiver
            .poll_part(streaming, &self.config, &mut self.deflate);
        Ok(match part.map_err(|v| self.fail(v))? {
            None => None,
            Some(Part::Message(message)) => {
                if message.is_data() {
                    self.receiver.count_data_delivered();
                }
                Some(Incoming::Control(message))
            }
            Some(Part::Chunk(chunk)) => {
                self.receiver.count_data_delivered();
                Some(Incoming::Chunk(chunk))
            }
            Some(Part::Ping(payload)) => Some(Incoming::Control(self.on_ping(payload))),
            Some(Part::Close(payload)) => Some(Incoming::Control(self.on_close(payload)?)),
        })
    }

    /// A ping arrived.
    fn on_ping(&mut self, payload: Bytes) -> Message {
        // §5.5.2: answer with a pong carrying the same data, unless we already sent a close.
        if self.config.auto_pong && self.closing.is_open() {
            self.sender.queue_auto_pong(&payload);
        }
        Message::Ping(payload)
    }

    /// The peer's close frame arrived.
    fn on_close(&mut self, payload: Bytes) -> Result<Message, Error> {
        // A malformed close fails the connection: our close carries the error's code.
        let frame = CloseFrame::parse(payload).map_err(|v| self.fail(v))?;
        let was_open = self.closing.is_open();
        // §5.5.1: reply with a close frame, echoing the status code.
        let echo = frame.as_ref().map(|f| CloseFrame::new(f.code, ""));
        self.timers.start_close_deadline(self.config.close_timeout);
        if was_open && !self.config.auto_close_reply {
            // The application answers (or the close deadline does).
            self.closing.owe_reply(echo);
            return Ok(Message::Close(frame));
        }
        if was_open {
            self.sender.encode_close(echo.as_ref());
        }
        self.end(after_close_handshake(self.role));
        Ok(Message::Close(frame))
    }
}
