//! The epoll loop (through mio): the shape of the io_uring loop on readiness instead of
//! completions, where io_uring is refused (Docker's default seccomp profile,
//! `kernel.io_uring_disabled`). One turn: wait for readiness or the next deadline; read every
//! ready connection into the loop's one receive buffer and hand the bytes to its engine; fire
//! the deadlines due; then write every connection that has output, with one `writev` each
//! straight from the engine's queue.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use mio::net::{TcpListener as MioListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use sockeye_proto::Transport;

use crate::connection::Conn;
use crate::handler::Handler;
use crate::shared::Shared;
use crate::timers::Timers;
use crate::turn::{Lingering, MAX_IOVECS, READS_PER_TURN, Stopping, deliver, next_wake, refuse_busy, woken};

const LISTENER: Token = Token(usize::MAX);

/// Write rounds of one connection per turn (each a vectored write, then `drain`), before the
/// others get theirs.
const WRITES_PER_TURN: usize = 4;
const WAKE: Token = Token(usize::MAX - 1);

struct Entry<D> {
    conn: Conn<D>,
    stream: TcpStream,
    /// Queued in `dirty` for this turn's writes.
    dirty: bool,
    /// Reading stopped before the socket ran dry (a turn's share, or output piled up past the
    /// high water mark): it goes on without a new readiness event.
    unread: bool,
    /// Reading stopped while the connection's output is past the high water mark (the peer
    /// sends but does not read): resumed once it is written down.
    paused: bool,
    /// The peer's FIN was read.
    read_closed: bool,
    /// Its socket still takes bytes and more is queued (see `flush`): written again next turn.
    rewrite: bool,
    /// The last turn in which input arrived (see `Lingering`).
    input_turn: u64,
}

/// Runs one loop thread until the server stops and its connections are closed (or the
/// shutdown timeout passed).
pub(crate) fn run<H: Handler>(
    listener: TcpListener,
    wake: std::io::PipeReader,
    shared: Arc<Shared>,
    mut handler: H,
) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut listener = Some(MioListener::from_std(listener));
    if let Some(l) = &mut listener {
        poll.registry().register(l, LISTENER, Interest::READABLE)?;
    }
    let mut wake = wake;
    {
        use std::os::fd::AsRawFd;
        poll.registry()
            .register(&mut SourceFd(&wake.as_raw_fd()), WAKE, Interest::READABLE)?;
    }
    let mut events = Events::with_capacity(1024);
    let mut conns: Slab<Entry<H::Data>> = Slab::new();
    let mut timers = Timers::default();
    let mut dirty: Vec<usize> = Vec::new();
    let mut unread: Vec<usize> = Vec::new();
    let mut rewrite: Vec<usize> = Vec::new();
    let mut buf = vec![0u8; shared.config.read_chunk_size.max(4096)];
    let mut pool: Vec<BytesMut> = Vec::new();
    let mut stopping: Option<Stopping> = None;
    let mut lingering = Lingering::default();
    let mut turn: u64 = 0;
    loop {
        turn += 1;
        let now = Instant::now();
        let timeout = if !unread.is_empty() || !rewrite.is_empty() {
            Some(std::time::Duration::ZERO)
        } else {
            next_wake(&timers, stopping.as_ref(), &lingering).map(|at| at.saturating_duration_since(now))
        };
        if let Err(e) = poll.poll(&mut events, timeout)
            && e.kind() != io::ErrorKind::Interrupted
        {
            return Err(e);
        }
        lingering.begin_turn(turn, Instant::now());
        for event in events.iter() {
            match event.token() {
                LISTENER => {
                    if let Some(l) = &listener {
                        accept_all(l, &mut poll, &mut conns, &shared)?;
                    }
                }
                WAKE => {
                    woken(&mut wake, &shared);
                    if shared.is_stopping() && stopping.is_none() {
                        if let Some(mut l) = listener.take() {
                            let _ = poll.registry().deregister(&mut l);
                        }
                        stopping = Some(Stopping::new(&shared));
                        for (key, entry) in conns.iter_mut() {
                            entry.conn.go_away();
                            mark(&mut dirty, entry, key);
                        }
                    }
                }
                Token(key) => {
                    let Some(entry) = conns.get_mut(key) else { continue };
                    // Read below, with the connections that had input left from the last turn
                    // (already queued, as is one paused at the high water mark until resumed).
                    if (event.is_readable() || event.is_read_closed()) && !entry.unread {
                        entry.unread = true;
                        unread.push(key);
                    }
                    mark(&mut dirty, entry, key);
                }
            }
        }
        for key in rewrite.drain(..) {
            if let Some(entry) = conns.get_mut(key) {
                mark(&mut dirty, entry, key);
            }
        }
        // Each connection with input reads its share (what is left waits for the next turn).
        for key in std::mem::take(&mut unread) {
            if let Some(entry) = conns.get_mut(key)
                && entry.unread
            {
                if read(
                    entry,
                    key,
                    &mut buf,
                    &shared,
                    &mut handler,
                    &mut unread,
                    &mut pool,
                ) {
                    entry.input_turn = turn;
                }
                mark(&mut dirty, entry, key);
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
        deliver(&shared, |key, f| {
            if let Some(entry) = conns.get_mut(key) {
                f(&mut entry.conn);
                mark(&mut dirty, entry, key);
            }
        });
        // Writes, and what the engines ask of their transports.
        for key in dirty.drain(..) {
            let Some(entry) = conns.get_mut(key) else { continue };
            entry.dirty = false;
            let result = flush(entry, &shared, &mut handler);
            let entry = &mut conns[key];
            if std::mem::take(&mut entry.rewrite) {
                rewrite.push(key);
            }
            if entry.paused && entry.conn.output_len() <= shared.config.write_buffer_high_water {
                entry.paused = false;
                unread.push(key);
            } else if result.is_ok() && !entry.unread && !entry.conn.has_output() {
                lingering.waits(key);
            }
            match result {
                Ok(true) => {
                    let entry = &mut conns[key];
                    let deadline = entry.conn.deadline();
                    timers.arm(key, &mut entry.conn.armed, deadline);
                }
                Ok(false) => close(conns.remove(key), &mut poll, None, &shared, &mut handler),
                Err(e) => close(conns.remove(key), &mut poll, Some(e), &shared, &mut handler),
            }
        }
        lingering.end_turn(Instant::now(), |key, since| {
            if let Some(entry) = conns.get_mut(key)
                && entry.input_turn <= since
                && !entry.unread
                && !entry.conn.has_output()
            {
                entry.conn.idle(&mut pool, shared.config.read_chunk_size);
            }
        });
        if let Some(s) = &stopping
            && (conns.is_empty() || s.is_over(Instant::now()))
        {
            for entry in conns.drain() {
                close(entry, &mut poll, None, &shared, &mut handler);
            }
            return Ok(());
        }
    }
}

fn mark<D>(dirty: &mut Vec<usize>, entry: &mut Entry<D>, key: usize) {
    if !entry.dirty {
        entry.dirty = true;
        dirty.push(key);
    }
}

fn accept_all<D: Default>(
    listener: &MioListener,
    poll: &mut Poll,
    conns: &mut Slab<Entry<D>>,
    shared: &Shared,
) -> io::Result<()> {
    loop {
        match listener.accept() {
            Ok((mut stream, peer)) => {
                if !shared.admit() {
                    refuse_busy(&mut stream);
                    continue;
                }
                let _ = stream.set_nodelay(shared.config.tcp_nodelay);
                let slot = conns.vacant_entry();
                let key = slot.key();
                poll.registry()
                    .register(&mut stream, Token(key), Interest::READABLE | Interest::WRITABLE)?;
                slot.insert(Entry {
                    conn: Conn::new(key, peer, Instant::now(), shared),
                    stream,
                    dirty: false,
                    unread: false,
                    paused: false,
                    read_closed: false,
                    rewrite: false,
                    input_turn: 0,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            // The peer gave up before we took it, or the process is out of descriptors: the
            // listener stays, the next turn tries again.
            Err(e) if is_transient_accept_error(&e) => {
                tracing::debug!("accept failed: {e}");
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads a turn's share of a connection's input (edge-triggered: until the socket is dry, or
/// the share is used, or the connection's output piled up past the high water mark: then it
/// stops reading until the peer takes it). Whether any input arrived.
fn read<H: Handler>(
    entry: &mut Entry<H::Data>,
    key: usize,
    buf: &mut [u8],
    shared: &Shared,
    handler: &mut H,
    unread: &mut Vec<usize>,
    pool: &mut Vec<BytesMut>,
) -> bool {
    let mut got = false;
    for _ in 0..READS_PER_TURN {
        if entry.read_closed || !matches!(entry.conn.transport(), Transport::Open | Transport::ShutdownWrite)
        {
            entry.unread = false;
            return got;
        }
        if entry.conn.output_len() > shared.config.write_buffer_high_water {
            // Resumed once written down (see `run`'s writes).
            entry.paused = true;
            return got;
        }
        match entry.stream.read(buf) {
            Ok(0) => {
                entry.read_closed = true;
                entry.unread = false;
                entry.conn.eof();
                return got;
            }
            Ok(n) => {
                got = true;
                entry.conn.input(&buf[..n], shared, handler, pool);
                if n < buf.len() {
                    // The socket held less than the buffer: it is dry, without a read more to
                    // hear it say so (a syscall per connection and turn). On Linux a TCP socket
                    // signals every arrival to epoll, edge-triggered or not (sk_data_ready →
                    // ep_poll_callback), so bytes that come after this read bring an event.
                    entry.unread = false;
                    return got;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                entry.unread = false;
                return got;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // Reset by the peer: the engine reports 1006.
                entry.read_closed = true;
                entry.unread = false;
                entry.conn.eof();
                return got;
            }
        }
    }
    unread.push(key);
    got
}

/// Writes what the connection has queued and carries out what its engine asks of the
/// transport. `Ok(false)`: the connection is over, close it.
fn flush<H: Handler>(entry: &mut Entry<H::Data>, shared: &Shared, handler: &mut H) -> io::Result<bool> {
    let transport = entry.conn.transport();
    if matches!(transport, Transport::Abort | Transport::Closed) {
        return Ok(false);
    }
    let mut done = write_out(entry)?;
    entry.conn.written(shared, handler);
    // `drain` may have queued more while the socket still takes bytes. Readiness is
    // edge-triggered: no writable event comes for that, so it is written now, a few rounds a turn
    // at most (then the connection is written again next turn: `rewrite`).
    let mut rounds = 1;
    while done && entry.conn.has_output() {
        if rounds == WRITES_PER_TURN {
            entry.rewrite = true;
            return Ok(true);
        }
        done = write_out(entry)?;
        entry.conn.written(shared, handler);
        rounds += 1;
    }
    if !done {
        // The socket's buffer is full: the next writable event comes back here.
        return Ok(true);
    }
    let stream = &entry.stream;
    Ok(entry.conn.carry_out(|| {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }))
}

/// Writes the head and the engine's queue with vectored writes until all is written (`true`) or
/// the socket takes no more (`false`).
fn write_out<D>(entry: &mut Entry<D>) -> io::Result<bool> {
    loop {
        let (head, transmit) = entry.conn.output();
        let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
        let mut n = 0;
        if !head.is_empty() {
            slices[0] = IoSlice::new(head);
            n = 1;
        }
        if let Some(t) = &transmit {
            n += t.chunks_vectored(&mut slices[n..]);
        }
        if n == 0 {
            return Ok(true);
        }
        let written = match entry.stream.write_vectored(&slices[..n]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => written,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (head, transmit) = entry.conn.output();
        let from_head = written.min(head.len());
        head.drain(..from_head);
        if let Some(t) = transmit {
            t.advance(written - from_head);
        }
    }
}

fn close<H: Handler>(
    mut entry: Entry<H::Data>,
    poll: &mut Poll,
    error: Option<io::Error>,
    shared: &Shared,
    handler: &mut H,
) {
    let _ = poll.registry().deregister(&mut entry.stream);
    shared.left();
    entry.conn.closed(error, handler);
}

fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNABORTED
                | libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::EPROTO
                | libc::EINTR
        )
    )
}
