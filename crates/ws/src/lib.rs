//! The `ws` command-line tool, built on the Sockeye library.
//!
//! Sub-commands carry IXWebSocket's names and flags, so that scripts written for its `ws` keep
//! working; `cat` and `listen` are websocat-style pipes.
//!
//! Exit codes: 0 success; 1 the connection failed (refused, TLS, handshake rejected, closed
//! abnormally, or closed by the peer with a code other than 1000/1001); 2 bad usage.

mod bench;
mod cli;
mod connect;
mod echo;
mod output;
mod pipe;
mod push;
mod relay;
mod shutdown;
mod tls;
mod tools;
mod transfer;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

pub use cli::{Cli, Command};

/// Parses `args` and runs the sub-command on a tokio runtime.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if cli.verbose > 0 {
        let level = if cli.verbose == 1 {
            tracing::Level::INFO
        } else {
            tracing::Level::DEBUG
        };
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_max_level(level)
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ws: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli.command));
    // A read of stdin may still be parked in a blocking thread; dropping the runtime would wait
    // for it forever. The command is done: do not wait.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ws: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(command: Command) -> Result<(), Failure> {
    match command {
        Command::EchoServer(args) => echo::server(args).await,
        Command::EchoClient(args) => echo::client(args).await,
        Command::PushServer(args) => push::server(args).await,
        Command::Cat(args) => pipe::cat(args).await,
        Command::Listen(args) => pipe::listen(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::BroadcastServer(args) => relay::server(args, "broadcast_server").await,
        Command::Transfer(args) => relay::server(args, "transfer").await,
        Command::Send(args) => transfer::send(args).await,
        Command::Receive(args) => transfer::receive(args).await,
        Command::Ping(args) => tools::ping(args).await,
        Command::Autoroute(args) => tools::autoroute(args).await,
        Command::Autobahn(args) => tools::autobahn(args).await,
        Command::Connect(args) => connect::run(args).await,
        Command::Chat(args) => pipe::chat(args).await,
    }
}

/// Why a sub-command failed: one line for stderr.
#[derive(Debug)]
pub struct Failure(String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<sockeye::Error> for Failure {
    fn from(e: sockeye::Error) -> Self {
        Failure(e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure(e.to_string())
    }
}

impl Failure {
    fn new(what: impl Into<String>) -> Self {
        Failure(what.into())
    }
}
