//! Printing: results and peer data go to stdout, diagnostics to stderr, and neither may panic.
//!
//! `println!` panics when stdout is a closed pipe (`ws cat URL | head -2`); a tool in a pipeline
//! must instead stop quietly, as `cat` and `grep` do. [`outln!`] returns the write's result
//! ([`Failure::stdout_closed`] for a closed pipe, which exits 0 without a word); [`errln!`]
//! ignores a closed stderr. Peer data is escaped by [`escape`] unless the user asked for raw output.

use std::fmt;
use std::io::Write;

use crate::failure::Failure;

/// Writes one line to stdout: `outln!("x = {x}")?`.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::stdout_line(format_args!($($arg)*)) };
}

/// Writes one line to stderr, ignoring a closed stderr: `errln!("retrying in {ms} ms")`.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::output::stderr_line(format_args!($($arg)*)) };
}

pub(crate) use {errln, outln};

#[doc(hidden)]
pub(crate) fn stdout_line(args: fmt::Arguments<'_>) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(stdout_error)
}

/// Flushes stdout (before a prompt, before exiting).
pub(crate) fn flush_stdout() -> Result<(), Failure> {
    std::io::stdout().flush().map_err(stdout_error)
}

/// A failed write to stdout: a closed pipe is the reader's way to say "enough".
pub(crate) fn stdout_error(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::stdout_closed()
    } else {
        Failure::new(format!("cannot write to stdout: {e}"))
    }
}

#[doc(hidden)]
pub(crate) fn stderr_line(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// `bytes` as one printable line: text as is; `\n` `\r` `\t` `\\` escaped; other control
/// characters and bytes that are not UTF-8 as `\xNN`; characters that reorder or hide text
/// (Unicode bidirectional controls such as U+202E, zero-width characters such as U+200B) as
/// `\u{NNNN}`, so that what is shown is what was sent.
pub(crate) fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                c if is_invisible_format(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Format characters (Unicode category Cf and the line/paragraph separators) that change how
/// the text around them is displayed, or are not displayed at all: bidirectional embeddings,
/// overrides and isolates (the "Trojan Source" characters), zero-width spaces and joiners, the
/// word joiner and invisible operators, the byte-order mark, interlinear annotation controls.
fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
    )
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_what_a_terminal_would_act_on() {
        assert_eq!(escape(b"plain text"), "plain text");
        assert_eq!(escape("é€".as_bytes()), "é€");
        assert_eq!(escape(b"a\nb\tc\\"), "a\\nb\\tc\\\\");
        assert_eq!(escape(b"\x1b[31mred"), "\\x1b[31mred");
        assert_eq!(escape(&[0xff, b'x', 0xc3]), "\\xffx\\xc3");
        assert_eq!(escape("\u{9b}".as_bytes()), "\\xc2\\x9b");
    }

    #[test]
    fn escapes_what_would_reorder_or_hide_text() {
        assert_eq!(escape("abc\u{202e}fed".as_bytes()), "abc\\u{202e}fed");
        assert_eq!(escape("pay\u{200b}pal".as_bytes()), "pay\\u{200b}pal");
        assert_eq!(escape("\u{2066}x\u{2069}".as_bytes()), "\\u{2066}x\\u{2069}");
        assert_eq!(escape("\u{feff}bom".as_bytes()), "\\u{feff}bom");
        assert_eq!(escape("a\u{2028}b".as_bytes()), "a\\u{2028}b");
        // Visible non-ASCII text stays as it is.
        assert_eq!(escape("שלום مرحبا 日本".as_bytes()), "שלום مرحبا 日本");
    }
}
