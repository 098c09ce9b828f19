//! Whether JSON that the node relays exactly as sent (a publication's `data`) reads the same in
//! every subscriber's parser. RFC 8259 leaves three things to each parser, and real ones differ
//! on all three; a frame one of them cannot read is lost to that subscriber whole:
//! - an escape of half a UTF-16 surrogate pair without its other half (§8.2): serde_json
//!   refuses the text, a browser keeps the lone half, Python's string then fails to encode.
//!   I-JSON (RFC 7493 §2.1) forbids it.
//! - nesting depth (§9): serde_json stops at 128 levels, and the frame around the data adds one.
//! - numbers beyond a 64-bit float (§6): serde_json refuses them, a browser reads infinity.
//!   I-JSON (§2.2) advises against them.

/// The deepest nesting of arrays and objects a relayed value may have: under serde_json's 128
/// with room for the frame around it.
pub(crate) const MAX_DEPTH: usize = 100;

/// Why `json` (valid JSON text, RFC 8259) cannot be relayed as sent, in words for an error
/// message that say what to send instead; `None` when every parser reads it alike. One pass.
pub(crate) fn not_relayable(json: &str) -> Option<String> {
    let bytes = json.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'"' => match string_end(json, i + 1) {
                Ok(end) => i = end,
                Err(at) => {
                    let escape = json.get(at..at + 6).unwrap_or("\\u…");
                    return Some(format!(
                        "holds an unpaired UTF-16 surrogate escape ({escape} at byte {at}), which I-JSON (RFC 7493 §2.1) forbids and JSON parsers read differently: escape a character beyond U+FFFF as its pair of surrogates, or send the character itself"
                    ));
                }
            },
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(format!(
                        "is nested more than {MAX_DEPTH} levels deep (at byte {i}): parsers limit nesting (RFC 8259 §9; serde_json stops at 128 levels); flatten it, or send it as a string"
                    ));
                }
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while bytes
                    .get(i)
                    .is_some_and(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                {
                    i += 1;
                }
                let number = json.get(start..i).unwrap_or("");
                // Only an exponent or over 308 digits can leave a float's range.
                let may_overflow = number.len() > 308 || number.contains(['e', 'E']);
                if may_overflow && number.parse::<f64>().map_or(true, f64::is_infinite) {
                    let shown: String = number.chars().take(24).collect();
                    return Some(format!(
                        "holds a number beyond a 64-bit float's range ({shown} at byte {start}), which I-JSON (RFC 7493 §2.2) advises against: parsers refuse it or read infinity; send it as a string"
                    ));
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// The offset just past the closing quote of the string whose text starts at `from`; or the
/// offset of an escape that is half a surrogate pair without its other half.
fn string_end(json: &str, from: usize) -> Result<usize, usize> {
    let bytes = json.as_bytes();
    // A high surrogate's escape just read: its low half must be the very next escape.
    let mut high: Option<usize> = None;
    let mut i = from;
    loop {
        let Some(found) = bytes
            .get(i..)
            .and_then(|rest| rest.iter().position(|&b| b == b'"' || b == b'\\'))
        else {
            // Not valid JSON after all (no closing quote): nothing more to read.
            return high.map_or(Ok(bytes.len()), Err);
        };
        let at = i + found;
        if let Some(high) = high
            && (at != i || bytes[at] == b'"')
        {
            return Err(high);
        }
        if bytes[at] == b'"' {
            return Ok(at + 1);
        }
        if bytes.get(at + 1) != Some(&b'u') {
            // `\n`, `\"`, `\\`…: two bytes.
            if let Some(high) = high {
                return Err(high);
            }
            i = at + 2;
            continue;
        }
        let Some(unit) = json
            .get(at + 2..at + 6)
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())
        else {
            return Err(at); // not valid JSON after all: refuse rather than relay
        };
        match unit {
            0xD800..=0xDBFF if high.is_none() => high = Some(at),
            0xDC00..=0xDFFF if high.is_some() => high = None,
            0xD800..=0xDFFF => return Err(high.unwrap_or(at)),
            _ if high.is_some() => return Err(high.unwrap_or(at)),
            _ => {}
        }
        i = at + 6;
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_DEPTH, not_relayable};

    #[test]
    fn what_every_parser_reads_alike_is_relayed() {
        let deepest = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        for ok in [
            r#""plain""#,
            r#""\u00e9 \n \" \\ \/ [ { 1e999""#,
            r#""\ud83d\ude00""#,
            r#""\uD83D\uDE00 and \ud83d\ude01""#,
            r#"["\\ud800"]"#,
            r#"{"a\\":"\\udc00"}"#,
            "[1, -2.5e3, 1e308, 1e-400, 123456789012345678901234567890, true, null]",
            &deepest,
        ] {
            assert_eq!(not_relayable(ok), None, "{ok}");
        }
    }

    #[test]
    fn surrogate_escapes_must_come_in_pairs() {
        for (bad, at) in [
            (r#""\udddd""#, 1),
            (r#""\ud83d""#, 1),
            (r#""\ud83d x""#, 1),
            (r#""\ud83d\n""#, 1),
            (r#""\ud83d\u0041""#, 1),
            (r#""\ud83d\ud83d\ude00""#, 1),
            (r#""\ude00\ud83d""#, 1),
            (r#"{"a":"ok","b":"\\\udfff"}"#, 17),
        ] {
            let why = not_relayable(bad).unwrap_or_default();
            assert!(why.contains(&format!("at byte {at})")), "{bad}: {why}");
            assert!(why.contains("surrogate"), "{bad}: {why}");
        }
    }

    #[test]
    fn too_deep_and_out_of_range_are_named() {
        let deeper = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let why = not_relayable(&deeper).unwrap_or_default();
        assert!(why.contains("nested more than 100 levels"), "{why}");
        let objects = format!(
            "{}1{}",
            r#"{"a":"#.repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        assert!(not_relayable(&objects).is_some());
        for big in ["1e400", "[-1E+309]", &"9".repeat(400)] {
            let why = not_relayable(big).unwrap_or_default();
            assert!(why.contains("beyond a 64-bit float"), "{big}: {why}");
        }
    }
}
