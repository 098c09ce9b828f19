//! The io_uring loop. One ring per thread, set up for one issuer with deferred task work (the
//! kernel runs completions when this thread enters it, not from interrupts). Per turn:
//!
//! 1. wait, in the same `io_uring_enter` that submits the last turn's operations, for a
//!    completion or the next deadline;
//! 2. take every completion: new connections from one multishot accept, input from one
//!    multishot receive per connection into a ring of provided buffers (a buffer goes back to
//!    the ring as soon as its bytes are copied to the engine; a large one, to a connection with
//!    nothing buffered, becomes the engine's read buffer and a new one takes its place), sends
//!    done;
//! 3. fire the deadlines due;
//! 4. for every connection with output and no send in flight, one `SendMsg` of everything it
//!    queued: small frames copied into the connection's send buffer, large payloads shared
//!    (`Bytes`), held until the kernel is done with them.
//!
//! This file is the crate's only `unsafe`: pointers handed to the kernel (buffers it fills
//! later, buffers it reads later, the buffer ring it shares), each with its `SAFETY:` comment.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use io_uring::types::{BufRingEntry, Fd, SubmitArgs, Timespec};
use io_uring::{IoUring, cqueue, opcode, squeue};
use slab::Slab;
use sockeye_proto::Transport;

use crate::connection::Conn;
use crate::handler::Handler;
use crate::shared::Shared;
use crate::timers::Timers;
use crate::turn::{Lingering, MAX_IOVECS, Stopping, deliver, next_wake, refuse_busy, woken};

/// Provided buffers: how many, and how large. 128 × 32 KiB = 4 MiB per thread, touched only
/// as the kernel fills them; a buffer (or its replacement) is back in the ring within the turn
/// that received it.
const BUFFERS: u16 = 128;
const BUFFER_SIZE: usize = 32 << 10;
const BUFFER_GROUP: u16 = 0;

/// Submission queue entries (the completion queue is twice as long).
const RING_ENTRIES: u32 = 4096;

/// Payloads at least this large are sent from their own `Bytes`, not copied into the send buffer.
const SHARE_FROM: usize = 4096;

/// A receive at least this large, for a connection with nothing buffered, is given to its engine
/// in the provided buffer itself (which the ring replaces with a new one), not copied out: a
/// 16 KiB message costs one allocation instead of a copy (and the allocation the engine's
/// buffer would have made to take it). Not for less: a message kept by the application holds
/// the whole buffer, at most four times its size here.
const LEND_FROM: usize = BUFFER_SIZE / 4;

/// A connection's send buffer is kept between sends up to this size (a busy connection pays no
/// allocation per send); a larger one, grown for a burst, is freed once sent.
const KEEP_COPIED: usize = 16 << 10;

/// What a completion is for: the top byte of its user data (the connection's key below).
const ACCEPT: u64 = 1 << 56;
const RECV: u64 = 2 << 56;
const SEND: u64 = 3 << 56;
const WAKE: u64 = 4 << 56;
const CANCEL: u64 = 5 << 56;
const KIND: u64 = 0xff << 56;

/// Whether this kernel and its seccomp profile let a loop run: a ring with the flags the loop
/// uses, a ring of provided buffers (5.19), and multishot receive (6.0).
pub(crate) fn probe() -> io::Result<()> {
    let ring = new_ring(8)?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "accept"),
        (opcode::RecvMulti::CODE, "recv"),
        (opcode::SendMsg::CODE, "sendmsg"),
        (opcode::PollAdd::CODE, "poll"),
    ] {
        if !probe.is_supported(code) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the kernel's io_uring has no {name}"),
            ));
        }
    }
    BufRing::new(&ring, 1, 64).map(drop)
}

fn new_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(entries * 2)
        .build(entries)
}

struct Entry<D> {
    conn: Conn<D>,
    /// Owns the descriptor: dropped (closed) only once no operation on it is in flight.
    stream: TcpStream,
    send: Outgoing,
    /// A multishot receive is armed on the socket.
    receiving: bool,
    /// Its cancellation is asked (input paused).
    cancelling: bool,
    dirty: bool,
    read_closed: bool,
    /// The last turn in which input arrived (see `Lingering`).
    input_turn: u64,
    /// The connection is over for the application (its handler was told); the entry waits for
    /// its last operations to complete before the descriptor is closed.
    over: bool,
}

/// A connection's send in flight: the bytes the kernel reads until it completes.
#[derive(Default)]
struct Outgoing {
    /// Small frames (and the handshake's response), copied.
    copied: Vec<u8>,
    /// Large payloads, shared; `pieces` says where each goes.
    shared: Vec<Bytes>,
    pieces: Vec<Piece>,
    iovecs: Vec<libc::iovec>,
    /// The message header the kernel reads (boxed: it must not move while a send is in flight).
    msg: Option<Box<libc::msghdr>>,
    in_flight: bool,
    /// Bytes the kernel took of this send so far, of `total`.
    sent: usize,
    total: usize,
}

#[derive(Clone, Copy)]
enum Piece {
    Copied { from: usize, to: usize },
    Shared(usize),
}

// SAFETY: not needed; `Outgoing` holds raw pointers (iovec, msghdr) only into its own heap
// buffers, and never leaves its thread.

/// Runs one loop thread until the server stops and its connections are closed (or the shutdown
/// timeout passed).
pub(crate) fn run<H: Handler>(
    listener: TcpListener,
    mut wake: std::io::PipeReader,
    shared: Arc<Shared>,
    mut handler: H,
) -> io::Result<()> {
    let ring = new_ring(RING_ENTRIES)?;
    let buffers = BufRing::new(&ring, BUFFERS, BUFFER_SIZE)?;
    let mut kernel = Kernel { ring, buffers };
    let result = turns(&mut kernel, listener, &mut wake, &shared, &mut handler);
    // What the kernel may still hold (after an error: operations in flight) is leaked rather
    // than freed under it; after a clean stop nothing is in flight and all is freed.
    if result.is_err() {
        std::mem::forget(kernel);
    }
    result
}

/// The ring and the buffers registered with it, dropped in that order.
struct Kernel {
    ring: IoUring,
    buffers: BufRing,
}

fn turns<H: Handler>(
    kernel: &mut Kernel,
    listener: TcpListener,
    wake: &mut std::io::PipeReader,
    shared: &Shared,
    handler: &mut H,
) -> io::Result<()> {
    let Kernel { ring, buffers } = kernel;
    let mut listener = Some(listener);
    let mut conns: Slab<Entry<H::Data>> = Slab::new();
    let mut timers = Timers::default();
    let mut dirty: Vec<usize> = Vec::new();
    let mut completions: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
    let mut pool: Vec<BytesMut> = Vec::new();
    let mut stopping: Option<Stopping> = None;
    let mut lingering = Lingering::default();
    let mut turn: u64 = 0;
    let mut sq = Submissions::default();
    // Whether the multishot accept is armed (it is not once the listener is closed and its
    // accept ended).
    let mut accepting = true;
    if let Some(l) = &listener {
        sq.push(accept_entry(l));
    }
    sq.push(wake_entry(wake));
    loop {
        turn += 1;
        // Submit the turn's operations, and wait for a completion or the next deadline.
        sq.flush(ring)?;
        wait(
            ring,
            next_wake(&timers, stopping.as_ref(), &lingering),
            &mut completions,
        )?;
        lingering.begin_turn(turn, Instant::now());
        for &(user_data, result, flags) in &completions {
            let key = (user_data & !KIND) as usize;
            match user_data & KIND {
                ACCEPT => {
                    if result >= 0 {
                        // SAFETY: the kernel just created this descriptor for us; nothing else
                        // owns it.
                        let stream = unsafe { TcpStream::from_raw_fd(result as RawFd) };
                        if listener.is_some() {
                            accept(stream, &mut conns, &mut sq, shared);
                        }
                    } else {
                        tracing::debug!("accept failed: {}", io::Error::from_raw_os_error(-result));
                    }
                    if !cqueue::more(flags) {
                        accepting = false;
                        if let Some(l) = &listener {
                            // The multishot accept ended (out of descriptors, say): armed again.
                            accepting = true;
                            sq.push(accept_entry(l));
                        }
                    }
                }
                WAKE => {
                    woken(wake, shared);
                    if shared.is_stopping() && stopping.is_none() {
                        // The multishot accept holds the listening socket open: cancelled, so
                        // that no client is accepted while the server stops.
                        listener = None;
                        sq.push(opcode::AsyncCancel::new(ACCEPT).build().user_data(CANCEL));
                        stopping = Some(Stopping::new(shared));
                        for (key, entry) in conns.iter_mut() {
                            entry.conn.go_away();
                            mark(&mut dirty, entry, key);
                        }
                    }
                    if !cqueue::more(flags) {
                        sq.push(wake_entry(wake));
                    }
                }
                RECV => {
                    let Some(entry) = conns.get_mut(key) else { continue };
                    if let Some(bid) = cqueue::buffer_select(flags) {
                        let len = usize::try_from(result).unwrap_or(0);
                        if len > 0 && !entry.over {
                            entry.input_turn = turn;
                            if len >= LEND_FROM && entry.conn.takes_buffer() {
                                let bytes = buffers.lend(bid, len);
                                entry.conn.input_buffer(bytes, shared, handler);
                            } else {
                                entry
                                    .conn
                                    .input(buffers.get(bid, len), shared, handler, &mut pool);
                                buffers.recycle(bid);
                            }
                        } else {
                            buffers.recycle(bid);
                        }
                    }
                    // Out of provided buffers, or cancelled to pause input: no end of input.
                    if result == 0 || (result < 0 && result != -libc::ENOBUFS && result != -libc::ECANCELED) {
                        // The peer's FIN, or an error (reset): the engine reports 1006 if the
                        // closing handshake did not finish.
                        entry.read_closed = true;
                        if !entry.over {
                            entry.conn.eof();
                        }
                    }
                    if !cqueue::more(flags) {
                        entry.receiving = false;
                        entry.cancelling = false;
                    }
                    mark(&mut dirty, entry, key);
                }
                // A receive cancelled: its own completion follows.
                CANCEL => {}
                SEND => {
                    let Some(entry) = conns.get_mut(key) else { continue };
                    if result < 0 {
                        entry.send.finish();
                        if !entry.over {
                            let error = io::Error::from_raw_os_error(-result);
                            end(entry, Some(error), shared, handler);
                        }
                    } else if entry.send.advance(result as usize) {
                        // The rest of this send: the kernel took part of it.
                        sq.push(entry.send.entry(entry.stream.as_raw_fd(), key));
                    }
                    mark(&mut dirty, entry, key);
                }
                _ => {}
            }
        }
        let now = Instant::now();
        while let Some((key, at)) = timers.pop_due(now) {
            if let Some(entry) = conns.get_mut(key)
                && entry.conn.fire(at, now)
            {
                mark(&mut dirty, entry, key);
            }
        }
        // Publications and sends from this turn's handlers and from elsewhere.
        deliver(shared, |key, f| {
            if let Some(entry) = conns.get_mut(key)
                && !entry.over
            {
                f(&mut entry.conn);
                mark(&mut dirty, entry, key);
            }
        });
        for key in dirty.drain(..) {
            let Some(entry) = conns.get_mut(key) else { continue };
            entry.dirty = false;
            if !entry.over {
                step(entry, key, &mut sq, shared, handler, &mut lingering);
                let deadline = entry.conn.deadline();
                timers.arm(key, &mut entry.conn.armed, deadline);
            }
            if entry.over && !entry.receiving && !entry.send.in_flight {
                // Nothing of the kernel's refers to it any more: the descriptor is closed here.
                conns.remove(key);
            }
        }
        lingering.end_turn(Instant::now(), |key, since| {
            if let Some(entry) = conns.get_mut(key)
                && entry.input_turn <= since
                && !entry.over
                && !entry.send.in_flight
                && !entry.conn.has_output()
            {
                entry.conn.idle(&mut pool, shared.config.read_chunk_size);
            }
        });
        if let Some(s) = &stopping
            && (conns.is_empty() || s.is_over(Instant::now()))
        {
            for (_, entry) in conns.iter_mut() {
                if !entry.over {
                    end(entry, None, shared, handler);
                }
            }
            return settle(ring, &mut conns, accepting, &mut completions);
        }
    }
}

/// Cancels everything in flight and waits for each operation's last completion (a second at
/// most), so that the buffers they use can be freed. An error: something is still in flight.
fn settle<D>(
    ring: &mut IoUring,
    conns: &mut Slab<Entry<D>>,
    accepting: bool,
    completions: &mut Vec<(u64, i32, u32)>,
) -> io::Result<()> {
    let cancel = opcode::AsyncCancel2::new(io_uring::types::CancelBuilder::any())
        .build()
        .user_data(CANCEL);
    // SAFETY: a cancellation refers to no memory of ours.
    unsafe {
        let _ = ring.submission().push(&cancel);
    }
    // The accept, if armed, and the wake-up poll (always armed), then each connection's receive
    // and send.
    let mut waiting = accepting as usize
        + 1
        + conns
            .iter()
            .map(|(_, e)| e.receiving as usize + e.send.in_flight as usize)
            .sum::<usize>();
    let until = Instant::now() + std::time::Duration::from_secs(1);
    while waiting > 0 {
        if Instant::now() >= until {
            return Err(io::Error::other(
                "operations still in flight a second after their cancellation",
            ));
        }
        wait(ring, Some(until), completions)?;
        for &(user_data, _, flags) in completions.iter() {
            if user_data & KIND == CANCEL || cqueue::more(flags) {
                continue;
            }
            let key = (user_data & !KIND) as usize;
            match user_data & KIND {
                RECV => {
                    if let Some(e) = conns.get_mut(key) {
                        e.receiving = false;
                    }
                }
                SEND => {
                    if let Some(e) = conns.get_mut(key) {
                        e.send.finish();
                    }
                }
                _ => {}
            }
            waiting -= 1;
        }
    }
    Ok(())
}

fn mark<D>(dirty: &mut Vec<usize>, entry: &mut Entry<D>, key: usize) {
    if !entry.dirty {
        entry.dirty = true;
        dirty.push(key);
    }
}

fn accept<D: Default>(
    mut stream: TcpStream,
    conns: &mut Slab<Entry<D>>,
    sq: &mut Submissions,
    shared: &Shared,
) {
    if !shared.admit() {
        refuse_busy(&mut stream);
        return;
    }
    let Ok(peer) = stream.peer_addr() else {
        // Gone already.
        shared.left();
        return;
    };
    let _ = stream.set_nodelay(shared.config.tcp_nodelay);
    let fd = stream.as_raw_fd();
    let slot = conns.vacant_entry();
    let key = slot.key();
    slot.insert(Entry {
        conn: Conn::new(key, peer, Instant::now(), shared),
        stream,
        send: Outgoing::default(),
        receiving: true,
        cancelling: false,
        dirty: false,
        input_turn: 0,
        read_closed: false,
        over: false,
    });
    sq.push(recv_entry(fd, key));
}

/// Submits what is queued and waits for a completion, or until `until`; then takes every
/// completion (user data, result, flags) into `completions`.
fn wait(
    ring: &mut IoUring,
    until: Option<Instant>,
    completions: &mut Vec<(u64, i32, u32)>,
) -> io::Result<()> {
    let waited = match until {
        Some(at) => {
            let wait = at.saturating_duration_since(Instant::now());
            let ts = Timespec::new().sec(wait.as_secs()).nsec(wait.subsec_nanos());
            ring.submitter()
                .submit_with_args(1, &SubmitArgs::new().timespec(&ts))
        }
        None => ring.submitter().submit_and_wait(1),
    };
    match waited {
        Ok(_) => {}
        // The time passed, a signal, or completions to take first: none is an error.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
        Err(e) => return Err(e),
    }
    completions.clear();
    completions.extend(ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
    Ok(())
}

/// The multishot accept on the thread's listener.
fn accept_entry(listener: &TcpListener) -> squeue::Entry {
    opcode::AcceptMulti::new(Fd(listener.as_raw_fd()))
        .flags(libc::SOCK_CLOEXEC)
        .build()
        .user_data(ACCEPT)
}

/// The multishot poll on the thread's wake-up pipe.
fn wake_entry(wake: &std::io::PipeReader) -> squeue::Entry {
    opcode::PollAdd::new(Fd(wake.as_raw_fd()), libc::POLLIN as u32)
        .multi(true)
        .build()
        .user_data(WAKE)
}

fn recv_entry(fd: RawFd, key: usize) -> squeue::Entry {
    opcode::RecvMulti::new(Fd(fd), BUFFER_GROUP)
        .build()
        .user_data(RECV | key as u64)
}

/// After a turn's input for this connection: its send, what its engine asks of the transport,
/// its receive armed again if it ended; waiting, it is one for `Lingering`.
fn step<H: Handler>(
    entry: &mut Entry<H::Data>,
    key: usize,
    sq: &mut Submissions,
    shared: &Shared,
    handler: &mut H,
    lingering: &mut Lingering,
) {
    if matches!(entry.conn.transport(), Transport::Abort | Transport::Closed) {
        return end(entry, None, shared, handler);
    }
    if !entry.send.in_flight {
        entry.conn.written(shared, handler);
        if entry.conn.has_output() {
            entry.send.fill(&mut entry.conn);
            sq.push(entry.send.entry(entry.stream.as_raw_fd(), key));
        } else {
            let stream = &entry.stream;
            if !entry.conn.carry_out(|| {
                let _ = stream.shutdown(std::net::Shutdown::Write);
            }) {
                return end(entry, None, shared, handler);
            }
        }
    }
    // Input stops while output piles up past the high water mark (the peer sends but does not
    // read): the receive is cancelled, and armed again once the output is written down.
    let backlog = entry.conn.output_len() > shared.config.write_buffer_high_water;
    if backlog && entry.receiving && !entry.cancelling {
        entry.cancelling = true;
        sq.push(
            opcode::AsyncCancel::new(RECV | key as u64)
                .build()
                .user_data(CANCEL | key as u64),
        );
    }
    if !entry.receiving && !entry.read_closed && !backlog {
        entry.receiving = true;
        sq.push(recv_entry(entry.stream.as_raw_fd(), key));
    }
    if !entry.send.in_flight && !entry.conn.has_output() {
        lingering.waits(key);
    }
}

/// The connection is over for the application: the handler is told, the socket shut down so
/// that its receive completes; the entry goes once nothing of it is in flight.
fn end<H: Handler>(entry: &mut Entry<H::Data>, error: Option<io::Error>, shared: &Shared, handler: &mut H) {
    entry.over = true;
    let _ = entry.stream.shutdown(std::net::Shutdown::Both);
    shared.left();
    let id = entry.conn.id();
    let conn = std::mem::replace(&mut entry.conn, Conn::ended(id));
    conn.closed(error, handler);
}

impl Outgoing {
    /// Takes everything the connection queued into this send.
    fn fill<D>(&mut self, conn: &mut Conn<D>) {
        debug_assert!(!self.in_flight);
        self.copied.clear();
        self.shared.clear();
        self.pieces.clear();
        let (head, transmit) = conn.output();
        if !head.is_empty() {
            // Taken, not copied (under TLS, all there is: the sealed records); the head keeps
            // the emptied send buffer's room.
            std::mem::swap(&mut self.copied, head);
            self.pieces.push(Piece::Copied {
                from: 0,
                to: self.copied.len(),
            });
        }
        if let Some(transmit) = transmit {
            while transmit.has_remaining() && self.pieces.len() < MAX_IOVECS {
                let len = transmit.chunk().len();
                if len >= SHARE_FROM {
                    self.shared.push(transmit.copy_to_bytes(len));
                    self.pieces.push(Piece::Shared(self.shared.len() - 1));
                } else {
                    let from = self.copied.len();
                    self.copied.extend_from_slice(transmit.chunk());
                    transmit.advance(len);
                    match self.pieces.last_mut() {
                        Some(Piece::Copied { to, .. }) if *to == from => *to = self.copied.len(),
                        _ => self.pieces.push(Piece::Copied {
                            from,
                            to: self.copied.len(),
                        }),
                    }
                }
            }
        }
        self.total = self.pieces.iter().map(|p| self.piece(*p).len()).sum();
        self.sent = 0;
        self.in_flight = true;
    }

    fn piece(&self, piece: Piece) -> &[u8] {
        match piece {
            Piece::Copied { from, to } => &self.copied[from..to],
            Piece::Shared(i) => &self.shared[i],
        }
    }

    /// The `SendMsg` of what is left of this send: its vectors point into `copied` and `shared`,
    /// which stay untouched until it completes.
    fn entry(&mut self, fd: RawFd, key: usize) -> squeue::Entry {
        self.iovecs.clear();
        let mut skip = self.sent;
        for i in 0..self.pieces.len() {
            let bytes = self.piece(self.pieces[i]);
            if skip >= bytes.len() {
                skip -= bytes.len();
                continue;
            }
            let rest = &bytes[skip..];
            skip = 0;
            self.iovecs.push(libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            });
        }
        // SAFETY: an all-zero msghdr is a valid empty one (no name, no control data).
        let msg = self
            .msg
            .get_or_insert_with(|| Box::new(unsafe { std::mem::zeroed() }));
        msg.msg_iov = self.iovecs.as_mut_ptr();
        msg.msg_iovlen = self.iovecs.len() as _;
        // MSG_NOSIGNAL: a peer gone is an error to report, not SIGPIPE.
        opcode::SendMsg::new(Fd(fd), &**msg as *const libc::msghdr)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(SEND | key as u64)
    }

    /// The kernel took `n` more bytes: `true` if some are left to send.
    fn advance(&mut self, n: usize) -> bool {
        self.sent += n;
        if self.sent >= self.total || n == 0 {
            self.finish();
            return false;
        }
        true
    }

    fn finish(&mut self) {
        self.in_flight = false;
        self.shared.clear();
        self.copied.clear();
        if self.copied.capacity() > KEEP_COPIED {
            // A batch of many small frames: not kept for an idle connection.
            self.copied = Vec::new();
        }
    }
}

/// Operations for the next `io_uring_enter`, pushed into the ring's submission queue when there
/// is room, kept here when the queue is full (a turn that arms more than the ring holds).
#[derive(Default)]
struct Submissions {
    waiting: Vec<squeue::Entry>,
}

impl Submissions {
    fn push(&mut self, entry: squeue::Entry) {
        self.waiting.push(entry);
    }

    fn flush(&mut self, ring: &mut IoUring) -> io::Result<()> {
        let mut from = 0;
        while from < self.waiting.len() {
            {
                let mut sq = ring.submission();
                while from < self.waiting.len() {
                    // SAFETY: every entry's pointers (send vectors and message headers, the
                    // buffer group, descriptors) stay valid until its completion: `Outgoing`
                    // keeps a send's buffers until then, and an entry's descriptor is closed
                    // only when none of its operations is in flight.
                    if unsafe { sq.push(&self.waiting[from]) }.is_err() {
                        break;
                    }
                    from += 1;
                }
            }
            if from < self.waiting.len() {
                ring.submit()?;
            }
        }
        self.waiting.clear();
        Ok(())
    }
}

/// A ring of provided buffers (`IORING_REGISTER_PBUF_RING`): the kernel picks a buffer per
/// receive; the loop gives it back once the bytes are handed on, or gives it away
/// ([`lend`](Self::lend)) and puts a new one in its place.
struct BufRing {
    /// The ring of entries the kernel reads, page-aligned.
    ring: *mut BufRingEntry,
    ring_layout: Layout,
    /// The buffers, each its own allocation of `size` bytes (empty `Vec`s: only the kernel
    /// writes them, and the bytes it wrote are read).
    buffers: Vec<Vec<u8>>,
    count: u16,
    size: usize,
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring, count: u16, size: usize) -> io::Result<BufRing> {
        assert!(count.is_power_of_two());
        let ring_layout = Layout::from_size_align(count as usize * std::mem::size_of::<BufRingEntry>(), 4096)
            .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { alloc_zeroed(ring_layout) as *mut BufRingEntry };
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let mut buf_ring = BufRing {
            ring: entries,
            ring_layout,
            buffers: (0..count).map(|_| Vec::with_capacity(size)).collect(),
            count,
            size,
            tail: 0,
        };
        // SAFETY: the ring's memory is page-aligned, zeroed, `count` entries long, and lives
        // until `drop`, which comes after the io_uring that uses it is dropped (the loop drops
        // its ring first) or unregistered.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, count, BUFFER_GROUP, 0)?;
        }
        for bid in 0..count {
            buf_ring.recycle(bid);
        }
        Ok(buf_ring)
    }

    /// The first `len` bytes of buffer `bid`, filled by the kernel's receive.
    fn get(&self, bid: u16, len: usize) -> &[u8] {
        let buffer = &self.buffers[bid as usize];
        assert!(len <= buffer.capacity());
        // SAFETY: within the buffer's allocation; the kernel filled `len` bytes of it and handed
        // it to us (its completion named it), so nothing writes it until it is recycled.
        unsafe { std::slice::from_raw_parts(buffer.as_ptr(), len) }
    }

    /// Takes buffer `bid`, holding the `len` bytes the kernel's receive filled, and gives the
    /// kernel a new buffer in its place.
    fn lend(&mut self, bid: u16, len: usize) -> Vec<u8> {
        let mut taken = std::mem::replace(&mut self.buffers[bid as usize], Vec::with_capacity(self.size));
        assert!(len <= taken.capacity());
        // SAFETY: the kernel wrote the first `len` bytes (its completion said so) and no longer
        // refers to the buffer: it left the ring with that completion and is not put back.
        unsafe { taken.set_len(len) };
        self.recycle(bid);
        taken
    }

    /// Gives buffer `bid` (as it now is: see `lend`) to the kernel.
    fn recycle(&mut self, bid: u16) {
        let slot = (self.tail & (self.count - 1)) as usize;
        let addr = self.buffers[bid as usize].as_mut_ptr();
        // SAFETY: `slot` < `count`: within the ring; the kernel reads an entry only once the
        // tail (published below) includes it. The buffer's allocation is `size` bytes and is
        // neither resized nor freed while the kernel may write it (until `lend` or `drop`).
        unsafe {
            let entry = &mut *self.ring.add(slot);
            entry.set_addr(addr as u64);
            entry.set_len(self.size as u32);
            entry.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field overlays the first entry's reserved field (the kernel's
        // layout); written atomically with release ordering, as liburing does, so the kernel
        // sees the entry before the tail.
        unsafe {
            let tail = BufRingEntry::tail(self.ring) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the kernel no longer uses it or the
        // buffers (the ring that registered them is gone or about to be: see `run`).
        unsafe {
            dealloc(self.ring as *mut u8, self.ring_layout);
        }
    }
}
