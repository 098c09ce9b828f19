//! The server sub-commands on Sockeye's own loop (`--runtime auto|uring|epoll`): the same
//! behaviour as on tokio (greeting, the Authorization check, the per-message log, Ctrl-C with
//! 1001), with a handler per loop thread instead of a task per connection.

use sockeye::{CloseCode, CloseFrame, Message};
use sockeye_loop::{Handler, Runtime, Socket};

use crate::cli::{EchoServerArgs, ServerRuntime};
use crate::failure::Failure;
use crate::interrupt;
use crate::output::errln;
use crate::tls::{listen_host, server_config, write_pidfile};

/// `ws echo_server --runtime auto|uring|epoll`.
pub(crate) async fn echo_server(args: EchoServerArgs) -> Result<(), Failure> {
    let opts = &args.server;
    let runtime = match args.runtime {
        ServerRuntime::Uring => Runtime::Uring,
        ServerRuntime::Epoll => Runtime::Epoll,
        _ => Runtime::Auto,
    };
    let (mut config, acceptor) = server_config(opts)?;
    config.shutdown_timeout = interrupt::CLOSE_GRACE;
    config.protocol.auto_pong = !args.no_pong;
    let host = listen_host(opts);
    let mut server = sockeye_loop::Server::new(config).runtime(runtime);
    if let Some(threads) = args.threads {
        server = server.threads(threads);
    }
    let scheme = if acceptor.is_some() { "wss" } else { "ws" };
    if let Some(acceptor) = &acceptor {
        server = server.tls(acceptor);
    }
    let (quiet, greet, authorization) = (crate::log::quiet(), args.greet, args.authorization.clone());
    let listening = server
        .listen((host, opts.port), move || Echo {
            quiet,
            greet,
            authorization: authorization.clone(),
        })
        .map_err(|e| match e.kind() {
            // io_uring refused here: the error says why and what to use.
            std::io::ErrorKind::Unsupported => Failure::new(e.to_string()),
            _ => Failure::new(format!("cannot listen on {host}:{}: {e}", opts.port)),
        })?;
    if let Some(pidfile) = &opts.pidfile {
        write_pidfile(pidfile)?;
    }
    errln!(
        "ws echo_server: listening on {scheme}://{} (own loop, {})",
        listening.local_addr(),
        match listening.runtime() {
            Runtime::Uring => "io_uring",
            _ => "epoll",
        }
    );
    let stop = listening.handle();
    let mut serving = tokio::task::spawn_blocking(move || listening.wait());
    tokio::select! {
        ended = &mut serving => return ended.map_err(|e| Failure::new(e.to_string()))?.map_err(Failure::from),
        _ = interrupt::requested() => stop.stop(),
    }
    // Ctrl-C: every connection was sent 1001; the loops end once they answer (or after the grace).
    serving
        .await
        .map_err(|e| Failure::new(e.to_string()))?
        .map_err(Failure::from)
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
