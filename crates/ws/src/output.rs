//! Printing peer data safely: control characters and invalid UTF-8 are escaped, so a hostile peer
//! cannot drive the terminal, and every message stays on one line.

/// `bytes` as one printable line: text as is, `\n` `\r` `\t` `\\` escaped, other control
/// characters and bytes that are not UTF-8 as `\xNN`.
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
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
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
}
