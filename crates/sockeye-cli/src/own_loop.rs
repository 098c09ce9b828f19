//! The server sub-commands on Sockeye's own loop (`--runtime auto|uring|epoll`, and the default
//! where no option needs tokio): the same behaviour as on tokio (greeting, the Authorization
//! check, the per-connection log, Ctrl-C with 1001), with a handler per loop thread instead of a
//! task per connection. `echo_server`, `push_server`, and `broadcast_server` on one node (the
//! loop's topics; `--backplane` is tokio's).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sockeye::{CloseCode, CloseFrame, Config, Message, PreparedMessage};
use sockeye_loop::{Closed, Handler, PublishError, Runtime, Sent, Socket};

use crate::cli::{EchoServerArgs, PushServerArgs, RuntimeOpts, ServerRuntime};
use crate::close::short_close;
use crate::failure::Failure;
use crate::interrupt;
use crate::opts::ServerOpts;
use crate::output::errln;
use crate::tls::{listen_host, server_config, write_pidfile};

/// The loop a server sub-command runs on: `None` for tokio. `needs_tokio` names an option only
/// tokio serves: then the default is tokio, and an explicit own loop is refused, saying why.
pub(crate) fn choose(opts: &RuntimeOpts, needs_tokio: Option<&str>) -> Result<Option<Runtime>, Failure> {
    let own = match opts.runtime {
        Some(ServerRuntime::Tokio) => None,
        None if needs_tokio.is_some() => None,
        None | Some(ServerRuntime::Auto) => Some(Runtime::Auto),
        Some(ServerRuntime::Uring) => Some(Runtime::Uring),
        Some(ServerRuntime::Epoll) => Some(Runtime::Epoll),
    };
    if own.is_some()
        && let Some(option) = needs_tokio
    {
        return Err(Failure::usage(format!(
            "{option} is served by the tokio loop only: use --runtime tokio (or leave --runtime out)"
        )));
    }
    if own.is_none() && opts.threads.is_some() {
        return Err(Failure::usage(
            "--threads is the own loop's (the tokio loop uses every core)",
        ));
    }
    Ok(own)
}

/// Starts `make_handler`'s server on the own loop with the sub-command's options, and serves
/// until it fails or Ctrl-C (then every connection gets 1001, and the loops end once they
/// answer, or after the grace).
async fn serve<H, F>(
    name: &str,
    opts: &ServerOpts,
    runtime: Runtime,
    threads: Option<usize>,
    configure: impl FnOnce(&mut Config),
    make_handler: F,
) -> Result<(), Failure>
where
    H: Handler,
    F: Fn() -> H + Send + Sync + 'static,
{
    let (mut config, acceptor) = server_config(opts)?;
    config.shutdown_timeout = interrupt::CLOSE_GRACE;
    configure(&mut config);
    let host = listen_host(opts);
    let mut server = sockeye_loop::Server::new(config).runtime(runtime);
    if let Some(threads) = threads {
        server = server.threads(threads);
    }
    let scheme = if acceptor.is_some() { "wss" } else { "ws" };
    if let Some(acceptor) = &acceptor {
        server = server.tls(acceptor);
    }
    let listening = server
        .listen((host, opts.port), make_handler)
        .map_err(|e| match e.kind() {
            // io_uring refused here: the error says why and what to use.
            std::io::ErrorKind::Unsupported => Failure::new(e.to_string()),
            _ => Failure::new(format!("cannot listen on {host}:{}: {e}", opts.port)),
        })?;
    if let Some(pidfile) = &opts.pidfile {
        write_pidfile(pidfile)?;
    }
    // The URL last, as on tokio: scripts take it from the end of the line.
    errln!(
        "ws {name} (own loop, {}): listening on {scheme}://{}",
        match listening.runtime() {
            Runtime::Uring => "io_uring",
            _ => "epoll",
        },
        listening.local_addr()
    );
    let handle = listening.handle();
    let mut serving = tokio::task::spawn_blocking(move || listening.wait());
    tokio::select! {
        ended = &mut serving => return ended.map_err(|e| Failure::new(e.to_string()))?.map_err(Failure::from),
        _ = interrupt::requested() => handle.stop(),
    }
    serving
        .await
        .map_err(|e| Failure::new(e.to_string()))?
        .map_err(Failure::from)
}

/// `ws echo_server` on the own loop.
pub(crate) async fn echo_server(args: EchoServerArgs, runtime: Runtime) -> Result<(), Failure> {
    let (quiet, greet, authorization) = (crate::log::quiet(), args.greet, args.authorization.clone());
    let no_pong = args.no_pong;
    serve(
        "echo_server",
        &args.server,
        runtime,
        args.runtime.threads,
        |c| c.protocol.auto_pong = !no_pong,
        move || Echo {
            quiet,
            greet,
            authorization: authorization.clone(),
        },
    )
    .await
}

/// The echo of `ws echo_server`, per loop thread.
struct Echo {
    quiet: bool,
    greet: bool,
    authorization: Option<String>,
}

/// What a connection of the echo remembers: whether its Authorization header was wrong.
#[derive(Default)]
struct Peer {
    refused: bool,
}

impl Handler for Echo {
    type Data = Peer;

    fn upgrade(
        &mut self,
        request: &http::Request<()>,
        response: http::Response<()>,
    ) -> Result<(http::Response<()>, Peer), http::Response<String>> {
        // As on tokio: a wrong Authorization is told with close code 4001 once upgraded.
        let refused = self.authorization.as_deref().is_some_and(|expected| {
            request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                != Some(expected)
        });
        Ok((response, Peer { refused }))
    }

    fn open(&mut self, socket: &mut Socket<'_, Peer>) {
        if socket.data().refused {
            if !self.quiet {
                errln!(
                    "{}: refused: missing or wrong Authorization header",
                    socket.peer_addr()
                );
            }
            socket.close(Some(CloseFrame::new(CloseCode(4001), "Permission denied")));
            return;
        }
        if !self.quiet {
            errln!("{}: connected", socket.peer_addr());
        }
        if self.greet {
            socket.send("Welcome !");
        }
    }

    fn message(&mut self, socket: &mut Socket<'_, Peer>, message: Message) {
        if socket.data().refused {
            return;
        }
        if !self.quiet {
            errln!(
                "{}: received {} bytes",
                socket.peer_addr(),
                message.as_payload().len()
            );
        }
        socket.send(message);
    }
}

/// `ws push_server` on the own loop: the path `/N` pushes N messages then closes (1000); any
/// other path pushes until the client leaves. Each client is pushed to until its queue passes
/// the high water mark, and again at each drain: as fast as it reads, never more in memory.
pub(crate) async fn push_server(args: PushServerArgs, runtime: Runtime) -> Result<(), Failure> {
    let quiet = crate::log::quiet();
    let no_pong = args.no_pong;
    let message = PreparedMessage::new(Message::text(args.send_msg.clone()))
        .ok_or_else(|| Failure::new("the message to push is not a data message"))?;
    serve(
        "push_server",
        &args.server,
        runtime,
        args.runtime.threads,
        |c| c.protocol.auto_pong = !no_pong,
        move || Push {
            quiet,
            message: message.clone(),
        },
    )
    .await
}

struct Push {
    quiet: bool,
    message: PreparedMessage,
}

/// A push client: how many messages are left (`None`: until it leaves), how many were sent.
#[derive(Default)]
struct Pushing {
    left: Option<u64>,
    sent: u64,
}

impl Push {
    fn fill(&self, socket: &mut Socket<'_, Pushing>) {
        loop {
            if socket.data().left == Some(0) {
                socket.close(Some(CloseFrame::new(CloseCode::NORMAL, "")));
                return;
            }
            let sent = socket.send_prepared(&self.message);
            if sent == Sent::Dropped {
                return;
            }
            let data = socket.data_mut();
            data.sent += 1;
            if let Some(left) = &mut data.left {
                *left -= 1;
            }
            if sent == Sent::Backpressure {
                // `drain` comes back here once the client has read it down.
                return;
            }
        }
    }
}

impl Handler for Push {
    type Data = Pushing;

    fn upgrade(
        &mut self,
        request: &http::Request<()>,
        response: http::Response<()>,
    ) -> Result<(http::Response<()>, Pushing), http::Response<String>> {
        let left = request.uri().path().trim_start_matches('/').parse().ok();
        Ok((response, Pushing { left, sent: 0 }))
    }

    fn open(&mut self, socket: &mut Socket<'_, Pushing>) {
        if !self.quiet {
            errln!(
                "{}: connected, pushing {}",
                socket.peer_addr(),
                socket
                    .data()
                    .left
                    .map_or("until it leaves".into(), |n| format!("{n} messages"))
            );
        }
        self.fill(socket);
    }

    fn message(&mut self, _: &mut Socket<'_, Pushing>, _: Message) {}

    fn drain(&mut self, socket: &mut Socket<'_, Pushing>) {
        self.fill(socket);
    }

    fn close(&mut self, data: Pushing, closed: Closed) {
        if !self.quiet {
            errln!("{}: sent {} messages", closed.peer, data.sent);
        }
    }
}

/// `ws broadcast_server` on the own loop, one node: every message is published to the other
/// clients on the same URL path (the topic), on every loop thread. A client more than 16 MiB
/// behind is closed with 1008, as the tokio relay's sessions are.
pub(crate) async fn broadcast_server(
    opts: &ServerOpts,
    runtime: Runtime,
    threads: Option<usize>,
    max_message: usize,
) -> Result<(), Failure> {
    let quiet = crate::log::quiet();
    let connected = Arc::new(AtomicUsize::new(0));
    serve(
        "broadcast_server",
        opts,
        runtime,
        threads,
        |c| c.protocol.max_message_size = max_message,
        move || Broadcast {
            quiet,
            connected: connected.clone(),
        },
    )
    .await
}

struct Broadcast {
    quiet: bool,
    /// Clients joined, on every thread.
    connected: Arc<AtomicUsize>,
}

/// A relay client: its topic (the path), or why the path is not one.
struct Member {
    topic: Result<String, String>,
    joined: bool,
}

impl Default for Member {
    fn default() -> Self {
        Member {
            topic: Err("no upgrade request".into()),
            joined: false,
        }
    }
}

impl Handler for Broadcast {
    type Data = Member;

    fn upgrade(
        &mut self,
        request: &http::Request<()>,
        response: http::Response<()>,
    ) -> Result<(http::Response<()>, Member), http::Response<String>> {
        let topic = sockeye_pubsub::Topic::new(request.uri().path())
            .map(|t| t.to_string())
            .map_err(|e| e.to_string());
        Ok((response, Member { topic, joined: false }))
    }

    fn open(&mut self, socket: &mut Socket<'_, Member>) {
        let topic = match &socket.data().topic {
            Ok(topic) => topic.clone(),
            Err(why) => {
                let frame = short_close(CloseCode::POLICY_VIOLATION, why);
                socket.close(Some(frame));
                return;
            }
        };
        socket.subscribe(&topic);
        socket.data_mut().joined = true;
        let now = self.connected.fetch_add(1, Ordering::Relaxed) + 1;
        if !self.quiet {
            errln!("{}: joined ({now} connected)", socket.peer_addr());
        }
    }

    fn message(&mut self, socket: &mut Socket<'_, Member>, message: Message) {
        let Ok(topic) = socket.data().topic.clone() else {
            return;
        };
        match socket.publish(&topic, message) {
            Ok(()) | Err(PublishError::Stopped) => {}
            Err(e) => {
                if !self.quiet {
                    errln!(
                        "{}: messages not delivered: {e}; closing with 1013",
                        socket.peer_addr()
                    );
                }
                socket.close(Some(short_close(CloseCode::TRY_AGAIN_LATER, &e.to_string())));
            }
        }
    }

    fn close(&mut self, data: Member, closed: Closed) {
        if data.joined {
            self.connected.fetch_sub(1, Ordering::Relaxed);
        }
        if !self.quiet {
            if closed.error.as_deref().is_some_and(|e| e.contains("max_backlog")) {
                errln!(
                    "{}: dropped: it does not read fast enough (closed with 1008)",
                    closed.peer
                );
            }
            errln!("{}: left", closed.peer);
        }
    }
}
