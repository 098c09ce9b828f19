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
mod ciphers;
mod cli;
mod client;
mod close;
mod connect;
mod console;
mod curl;
mod dnslookup;
mod docs;
mod echo;
mod failure;
mod gzip;
mod httpd;
mod interrupt;
mod jwks;
mod log;
mod opts;
mod output;
mod own_loop;
mod pipe;
mod probe;
mod proxy_server;
mod pubsub;
mod push;
mod ready;
mod relay;
mod terminal;
mod tls;
mod transfer;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

pub use cli::{Cli, Command};
pub use failure::Failure;

use crate::output::errln;

/// The clap definition of the whole tool, each long flag and sub-command also under its other
/// spelling (`_` for `-` and back): the one place completions, the man page and parsing share.
pub fn command() -> clap::Command {
    both_spellings(Cli::command())
}

fn both_spellings(command: clap::Command) -> clap::Command {
    // `--count -1` must reach the value parser (which names the flag), not look like a flag.
    let command = command.allow_negative_numbers(true).mut_args(|arg| {
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
    if let Err(failure) = log::start(cli.quiet, cli.verbose, cli.log_format, cli.logfile.as_deref()) {
        errln!("ws: {}", failure.message);
        return ExitCode::from(failure.exit_code);
    }
    let runtime = match runtime_builder().enable_all().build() {
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
        Command::BroadcastServer(args) => {
            let needs_tokio = args.backplane.is_some().then_some("--backplane");
            match own_loop::choose(&args.runtime, needs_tokio)? {
                Some(runtime) => {
                    own_loop::broadcast_server(
                        &args.relay.server,
                        runtime,
                        args.runtime.threads,
                        relay::LOCAL_MAX_MESSAGE,
                    )
                    .await
                }
                None => relay::server(args.relay, args.backplane, "broadcast_server").await,
            }
        }
        Command::PubsubServer(args) => pubsub::server(*args).await,
        Command::Transfer(args) => relay::server(args, None, "transfer").await,
        Command::Send(args) => transfer::send(args).await,
        Command::Receive(args) => transfer::receive(args).await,
        Command::Ping(args) => probe::ping(args).await,
        Command::Autoroute(args) => probe::autoroute(args).await,
        Command::Autobahn(args) => probe::autobahn(args).await,
        Command::Connect(args) => connect::run(args).await,
        Command::Chat(args) => pipe::chat(args).await,
        Command::Curl(args) => curl::run(args).await,
        Command::Httpd(args) => httpd::run(args).await,
        Command::Dnslookup(args) => dnslookup::run(args).await,
        Command::Gzip(args) => gzip::gzip(args).await,
        Command::Completions(args) => docs::completions(args, crate::command()),
        Command::Man(args) => docs::man(args, crate::command()),
        Command::Gunzip(args) => gzip::gunzip(args).await,
        Command::ProxyServer(args) => proxy_server::server(args).await,
    }
}

/// The runtime every command runs on: tokio's work-stealing one where the process may use more
/// than one CPU, a current-thread one where it may use only one (`taskset -c 0`, a container
/// of one CPU). There a work-stealing runtime can spread nothing and still pays its bookkeeping
/// at every wake-up: about 650 instructions, a fifth of a 64-byte echo (callgrind,
/// bench/README.md "Every core").
fn runtime_builder() -> tokio::runtime::Builder {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() == 1 => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::command;

    #[test]
    fn every_sub_command_is_well_formed() {
        // clap's own checks (unique names, valid requires/conflicts), for every sub-command,
        // with the second spellings added.
        command().debug_assert();
    }

    #[test]
    fn completions_and_man_pages_cover_every_sub_command() {
        let names: Vec<String> = command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut command(), "ws", &mut out);
            let script = String::from_utf8_lossy(&out);
            for name in &names {
                assert!(script.contains(name.as_str()), "{shell}: no {name}");
            }
        }
        let mut page = Vec::new();
        clap_mangen::Man::new(command()).render(&mut page).unwrap();
        let page = String::from_utf8_lossy(&page);
        assert!(page.contains(".TH ws 1"), "{page}");
        for name in &names {
            assert!(page.contains(name.as_str()), "man page: no {name}");
        }
    }

    #[test]
    fn every_sub_command_help_ends_with_examples_and_exit_codes() {
        for sub in command().get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let after = sub.get_after_help().map(|h| h.to_string()).unwrap_or_default();
            let examples = after.split_once("Examples:\n").map_or(0, |(_, rest)| {
                rest.lines().take_while(|l| l.starts_with("  ")).count()
            });
            assert!(examples >= 2, "{}: two examples or more: {after}", sub.get_name());
            assert!(after.contains("Exit codes:"), "{}: {after}", sub.get_name());
        }
    }

    #[test]
    fn q_v_and_the_log_format_mean_the_same_in_every_sub_command() {
        // One global -q and -v, no sub-command's own: `-q` once meant "no per-message log"
        // in one, "no headers" in another, "nothing unless it fails" in a third.
        let mut cmd = command();
        cmd.build();
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            for (short, id) in [('q', "quiet"), ('v', "verbose")] {
                let args: Vec<_> = sub
                    .get_arguments()
                    .filter(|a| a.get_short() == Some(short))
                    .collect();
                assert_eq!(args.len(), 1, "{}: -{short}", sub.get_name());
                assert!(
                    args[0].get_id() == id && args[0].is_global_set(),
                    "{}: -{short} is {}",
                    sub.get_name(),
                    args[0].get_id()
                );
            }
            assert!(
                sub.get_arguments().any(|a| a.get_long() == Some("log-format")),
                "{}",
                sub.get_name()
            );
        }
        assert!(
            command()
                .try_get_matches_from(["ws", "echo_server", "-q", "-v"])
                .is_err()
        );
    }

    #[test]
    fn every_long_flag_takes_both_spellings() {
        let cmd = command();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if !long.contains(['_', '-']) {
                    continue;
                }
                let other = super::swap_separator(long);
                let aliases = arg.get_all_aliases().unwrap_or_default();
                assert!(
                    aliases.contains(&other.as_str()),
                    "{} --{long}: no alias --{other}",
                    sub.get_name()
                );
            }
        }
    }
}
