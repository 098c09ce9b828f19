//! The terminal's mode, saved before the line editor ([`crate::console`]) puts it in raw mode
//! and put back when the console ends or the process exits early ([`crate::interrupt`]'s second
//! Ctrl-C). A leaf, so that both can use it without using each other.

#[cfg(unix)]
use std::io::IsTerminal;
#[cfg(unix)]
use std::sync::Mutex;

#[cfg(unix)]
static SAVED_TERMINAL: Mutex<Option<nix::sys::termios::Termios>> = Mutex::new(None);

/// Remembers the terminal's mode before the line editor switches it to raw mode.
pub(crate) fn save_terminal() {
    #[cfg(unix)]
    if std::io::stdin().is_terminal()
        && let Ok(mode) = nix::sys::termios::tcgetattr(std::io::stdin())
    {
        *SAVED_TERMINAL.lock().unwrap_or_else(|p| p.into_inner()) = Some(mode);
    }
}

/// Puts the terminal back as it was: the process may end while the editor, blocked in its
/// thread, still has it in raw mode (no echo, no line discipline) — a shell left like that is
/// unusable. Called when the console is dropped and before any early exit.
pub(crate) fn restore_terminal() {
    #[cfg(unix)]
    if let Some(mode) = SAVED_TERMINAL.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, mode);
    }
}
