//! `ws completions SHELL` and `ws man`: generated from the clap definitions the parser uses, so
//! they can never disagree with what the tool accepts.

use std::path::PathBuf;

use clap::Args;
use clap_complete::Shell;

use crate::failure::Failure;
use crate::output::{errln, stdout_error};

/// `completions`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ws completions bash > ~/.local/share/bash-completion/completions/ws
  ws completions zsh > ~/.zfunc/_ws            (with fpath+=~/.zfunc in ~/.zshrc)
  ws completions fish > ~/.config/fish/completions/ws.fish

Exit codes: 0 done, 2 usage.")]
pub struct CompletionsArgs {
    /// The shell to write a completion script for.
    pub shell: Shell,
}

/// `man`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ws man | man -l -
  ws man --dir ~/.local/share/man/man1        then: man ws, man ws-connect

Exit codes: 0 done, 1 cannot write a file, 2 usage.")]
pub struct ManArgs {
    /// Write ws.1 and one page per sub-command (ws-connect.1, …) into this directory instead of
    /// printing ws.1 to stdout.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// `command` is the whole tool's clap definition ([`crate::command`]).
pub(crate) fn completions(args: CompletionsArgs, mut command: clap::Command) -> Result<(), Failure> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "ws", &mut out);
    write_stdout(&out)
}

/// `command` is the whole tool's clap definition ([`crate::command`]).
pub(crate) fn man(args: ManArgs, command: clap::Command) -> Result<(), Failure> {
    let Some(dir) = args.dir else {
        let mut out = Vec::new();
        render(&command, &mut out)?;
        return write_stdout(&out);
    };
    std::fs::create_dir_all(&dir).map_err(|e| Failure::new(format!("{}: {e}", dir.display())))?;
    let mut pages = vec![("ws.1".to_string(), command.clone())];
    for sub in command.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        // Named as git names its pages: `man ws-connect`.
        let name = format!("ws-{}", sub.get_name());
        pages.push((format!("{name}.1"), sub.clone().name(name)));
    }
    for (file, page) in &pages {
        let mut out = Vec::new();
        render(page, &mut out)?;
        let path = dir.join(file);
        std::fs::write(&path, out).map_err(|e| Failure::new(format!("{}: {e}", path.display())))?;
    }
    errln!("ws man: wrote {} pages to {}", pages.len(), dir.display());
    Ok(())
}

fn render(command: &clap::Command, out: &mut Vec<u8>) -> Result<(), Failure> {
    clap_mangen::Man::new(command.clone())
        .render(out)
        .map_err(|e| Failure::new(format!("cannot render the man page: {e}")))
}

fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(stdout_error)
}
