//! The `Sec-WebSocket-Extensions` grammar (RFC 6455 §9.1): [`ExtensionOffer`], its parser and
//! its header syntax.
//!
//! A leaf of the crate's import graph: the handshakes parse offers and responses with it,
//! permessage-deflate reads and writes its parameters with it, and the negotiation in
//! `extension/mod.rs` calls the handshake; with the grammar apart, none of those files imports
//! one that imports it back.

use std::fmt;

/// One extension in a `Sec-WebSocket-Extensions` header: a name and its parameters, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExtensionOffer {
    /// The extension token, e.g. `permessage-deflate`.
    pub name: String,
    /// Parameters in the order given; a parameter without `=value` has `None`.
    pub params: Vec<(String, Option<String>)>,
}

/// A `Sec-WebSocket-Extensions` value that does not follow the grammar of RFC 6455 §9.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidExtensionHeader(pub String);

impl fmt::Display for InvalidExtensionHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid Sec-WebSocket-Extensions header: {}", self.0)
    }
}

impl std::error::Error for InvalidExtensionHeader {}

/// Parses the extensions of one or more `Sec-WebSocket-Extensions` header values, in order.
///
/// ```
/// use sockeye_proto::extension::parse_extensions;
/// let offers = parse_extensions(["permessage-deflate; client_max_window_bits, x-foo; a=\"1\""]).unwrap();
/// assert_eq!(offers[0].name, "permessage-deflate");
/// assert_eq!(offers[0].params, vec![("client_max_window_bits".to_string(), None)]);
/// assert_eq!(offers[1].params, vec![("a".to_string(), Some("1".to_string()))]);
/// ```
pub fn parse_extensions<'a>(
    values: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<ExtensionOffer>, InvalidExtensionHeader> {
    let mut out = Vec::new();
    for value in values {
        let mut p = Parser {
            s: value.as_bytes(),
            i: 0,
        };
        loop {
            p.skip_ws();
            if p.eat(b',') {
                continue; // empty list elements are allowed (RFC 7230 §7)
            }
            if p.done() {
                break;
            }
            let name = p.token().ok_or_else(|| p.error("expected an extension name"))?;
            let mut offer = ExtensionOffer {
                name,
                params: Vec::new(),
            };
            loop {
                p.skip_ws();
                if !p.eat(b';') {
                    break;
                }
                p.skip_ws();
                let key = p.token().ok_or_else(|| p.error("expected a parameter name"))?;
                p.skip_ws();
                let value = if p.eat(b'=') {
                    p.skip_ws();
                    Some(
                        p.token_or_quoted()
                            .ok_or_else(|| p.error("expected a parameter value"))?,
                    )
                } else {
                    None
                };
                offer.params.push((key, value));
            }
            out.push(offer);
            p.skip_ws();
            if !p.done() && !p.eat(b',') {
                return Err(p.error("expected ',' between extensions"));
            }
        }
    }
    Ok(out)
}

impl fmt::Display for ExtensionOffer {
    /// Writes the offer in header syntax, e.g. `permessage-deflate; client_max_window_bits=10`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        for (k, v) in &self.params {
            match v {
                Some(v) => write!(f, "; {k}={v}")?,
                None => write!(f, "; {k}")?,
            }
        }
        Ok(())
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn done(&self) -> bool {
        self.i >= self.s.len()
    }

    fn skip_ws(&mut self) {
        while matches!(self.s.get(self.i), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// RFC 7230 §3.2.6 token characters.
    fn token(&mut self) -> Option<String> {
        let start = self.i;
        while self.s.get(self.i).is_some_and(|&c| is_tchar(c)) {
            self.i += 1;
        }
        (self.i > start).then(|| String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    /// A token, or a quoted string whose unquoted value must itself be a token (RFC 6455 §9.1).
    fn token_or_quoted(&mut self) -> Option<String> {
        if !self.eat(b'"') {
            return self.token();
        }
        let mut value = Vec::new();
        loop {
            match *self.s.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => {
                    value.push(*self.s.get(self.i + 1)?);
                    self.i += 2;
                }
                c => {
                    value.push(c);
                    self.i += 1;
                }
            }
        }
        (!value.is_empty() && value.iter().all(|&c| is_tchar(c)))
            .then(|| String::from_utf8_lossy(&value).into_owned())
    }

    fn error(&self, what: &str) -> InvalidExtensionHeader {
        InvalidExtensionHeader(format!("{what} at byte {}", self.i))
    }
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_params_and_quotes() {
        let got = parse_extensions([
            "permessage-deflate; client_max_window_bits; server_max_window_bits=10",
            " , permessage-deflate ;server_no_context_takeover,x-y;a=\"15\"",
        ])
        .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0].params[1],
            ("server_max_window_bits".into(), Some("10".into()))
        );
        assert_eq!(got[1].params, vec![("server_no_context_takeover".into(), None)]);
        assert_eq!(got[2].params, vec![("a".into(), Some("15".into()))]);
        assert_eq!(
            got[0].to_string(),
            "permessage-deflate; client_max_window_bits; server_max_window_bits=10"
        );
    }

    #[test]
    fn rejects_bad_grammar() {
        for bad in [
            "permessage-deflate;",
            "a b",
            "a; =1",
            "a; b=",
            "a; b=\"unterminated",
            "a; b=\"\"",
            "a; b=\"x y\"",
        ] {
            assert!(parse_extensions([bad]).is_err(), "{bad}");
        }
    }
}
