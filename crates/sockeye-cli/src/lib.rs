//! The `ws` command-line tool, built on the Sockeye library.
//!
//! Sub-commands carry IXWebSocket's names and flags, so that scripts written for its `ws` keep
//! working; `cat` and `listen` are websocat-style pipes. Every long flag is accepted with `_` or
//! `-` (`--send_msg` and `--send-msg`).
//!
//! Exit codes: 0 success (also: a server stopped by Ctrl-C, or stdout closed by its reader);
//! 1 the work failed (connection refused, TLS, handshake rejected, closed abnormally, or closed
//! by the peer with a code other than 1000/1001); 2 bad usage (unknown flag, bad number, bad
//! URL, missing file); 130 a client stopped by Ctrl-C or SIGTERM.

mod bench;
mod cli;
mod connect;
mod echo;
mod interrupt;
mod output;
mod pipe;
mod proxy_server;
mod push;
mod relay;
mod tls;
mod tools;
mod transfer;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

pub use cli::{Cli, Command};

use crate::output::errln;

/// The clap definition of the whole tool, each long flag and sub-command also under its other
/// spelling (`_` for `-` and back): the one place completions, the man page and parsing share.
pub fn command() -> clap::Command {
    both_spellings(Cli::command())
}

fn both_spellings(command: clap::Command) -> clap::Command {
    let command = command.mut_args(|arg| {
        let Some(long) = arg.get_long() else { return arg };
        let other = swap_separator(long);
        let known = arg
            .get_all_aliases()
            .is_some_and(|aliases| aliases.contains(&other.as_str()));
        if other == long || known {
            arg
        } else {
            arg.alias(other)
        }
    });
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names.iter().fold(command, |command, name| {
        command.mut_subcommand(name, |sub| {
            let other = swap_separator(sub.get_name());
            let sub = if other == sub.get_name() {
                sub
            } else {
                sub.alias(other)
            };
            both_spellings(sub)
        })
    })
}

fn swap_separator(name: &str) -> String {
    if name.contains('_') {
        name.replace('_', "-")
    } else {
        name.replace('-', "_")
    }
}

/// Parses `args` and runs the sub-command on a tokio runtime.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let parsed = command()
        .try_get_matches_from(args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
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
            errln!("ws: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        interrupt::listen();
        dispatch(cli.command).await
    });
    // A read of stdin may still be parked in a blocking thread; dropping the runtime would wait
    // for it forever. The command is done: do not wait.
    runtime.shutdown_background();
    let _ = output::flush_stdout();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !failure.message.is_empty() {
                errln!("ws: {}", failure.message);
            }
            ExitCode::from(failure.exit_code)
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
        Command::ProxyServer(args) => proxy_server::server(args).await,
    }
}

/// Why a sub-command failed: one line for stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    message: String,
    exit_code: u8,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<sockeye::Error> for Failure {
    fn from(e: sockeye::Error) -> Self {
        Failure::new(e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::new(e.to_string())
    }
}

impl Failure {
    /// The work failed: exit 1.
    fn new(what: impl Into<String>) -> Self {
        Failure {
            message: what.into(),
            exit_code: 1,
        }
    }

    /// The command line asks for something impossible: exit 2.
    fn usage(what: impl Into<String>) -> Self {
        Failure {
            message: what.into(),
            exit_code: 2,
        }
    }

    /// Stopped by Ctrl-C or SIGTERM before the work was done: exit 130, no message (the user
    /// knows), after the connection was closed as cleanly as the grace period allowed.
    fn interrupted() -> Self {
        Failure {
            message: String::new(),
            exit_code: 130,
        }
    }

    /// Stdout was closed by its reader (`ws cat URL | head -2`): stop quietly, exit 0.
    fn stdout_closed() -> Self {
        Failure {
            message: String::new(),
            exit_code: 0,
        }
    }
}
