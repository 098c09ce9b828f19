//! The interactive side of `connect` and `chat`: lines typed at a prompt with editing and
//! history on a terminal (plain lines from a pipe), and output printed above the prompt, so that
//! a message arriving while the user types does not tear the line being edited.
//!
//! Line editing blocks, so it runs on a thread of its own and hands lines over a channel. The
//! terminal is in raw mode while the prompt is shown: Ctrl-C arrives as a key, not a signal, and
//! is turned into the same stop request a SIGINT makes ([`crate::interrupt::request`]). Ctrl-D
//! (or the end of a pipe) ends the input.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use rustyline::ExternalPrinter;
use rustyline::error::ReadlineError;
use tokio::sync::mpsc;

use crate::failure::Failure;
use crate::output::outln;
use crate::terminal::{restore_terminal, save_terminal};

type Printer = Arc<Mutex<Box<dyn ExternalPrinter + Send>>>;

impl Drop for Console {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Lines in, lines out.
pub(crate) struct Console {
    lines: mpsc::Receiver<String>,
    printer: Option<Printer>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("terminal", &self.printer.is_some())
            .finish()
    }
}

impl Console {
    /// Starts reading; `prompt` is shown on a terminal only.
    pub(crate) fn start(prompt: &str) -> Console {
        save_terminal();
        let (tx, lines) = mpsc::channel(64);
        let (printer_tx, printer_rx) = std::sync::mpsc::channel::<Option<Printer>>();
        let prompt = prompt.to_string();
        std::thread::spawn(move || {
            if std::io::stdin().is_terminal()
                && std::io::stdout().is_terminal()
                && let Ok(mut editor) = rustyline::DefaultEditor::new()
            {
                let printer = editor
                    .create_external_printer()
                    .ok()
                    .map(|p| Arc::new(Mutex::new(Box::new(p) as Box<dyn ExternalPrinter + Send>)));
                let _ = printer_tx.send(printer);
                loop {
                    match editor.readline(&prompt) {
                        Ok(line) => {
                            let _ = editor.add_history_entry(line.as_str());
                            if tx.blocking_send(line).is_err() {
                                return;
                            }
                        }
                        Err(ReadlineError::Interrupted) => crate::interrupt::request(),
                        Err(_) => return,
                    }
                }
            }
            let _ = printer_tx.send(None);
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { return };
                if tx.blocking_send(line).is_err() {
                    return;
                }
            }
        });
        let printer = printer_rx.recv().ok().flatten();
        Console { lines, printer }
    }

    /// The next line; `None` once input ended (Ctrl-D, end of a pipe). Cancel-safe.
    pub(crate) async fn next_line(&mut self) -> Option<String> {
        self.lines.recv().await
    }

    /// Prints a diagnostic (reconnecting, not connected): above the prompt on a terminal, to
    /// stderr otherwise, so that piped stdout carries only what the connection said.
    pub(crate) fn note(&self, line: String) -> Result<(), Failure> {
        if self.printer.is_some() {
            self.print(line)
        } else {
            crate::output::errln!("{line}");
            Ok(())
        }
    }

    /// Prints a line: above the prompt on a terminal, to stdout otherwise.
    pub(crate) fn print(&self, line: String) -> Result<(), Failure> {
        match &self.printer {
            Some(printer) => {
                let mut printer = printer.lock().unwrap_or_else(|p| p.into_inner());
                printer
                    .print(format!("{line}\n"))
                    .map_err(|e| Failure::new(format!("cannot write to the terminal: {e}")))
            }
            None => outln!("{line}"),
        }
    }
}
