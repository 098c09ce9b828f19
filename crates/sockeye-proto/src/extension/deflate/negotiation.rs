//! permessage-deflate's parameters (RFC 7692 §7.1) in `Sec-WebSocket-Extensions`: the offer a
//! client sends, a server's choice among offers (§5.1) and a client's check of the answer.

use super::config::DeflateConfig;
use crate::extension::offer::ExtensionOffer;

/// The extension's registered name.
pub const NAME: &str = "permessage-deflate";

/// The parameters both ends agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateParams {
    /// The server resets its compression context after every message.
    pub server_no_context_takeover: bool,
    /// The client resets its compression context after every message.
    pub client_no_context_takeover: bool,
    /// The server compresses with at most this many window bits.
    pub server_max_window_bits: u8,
    /// The client compresses with at most this many window bits.
    pub client_max_window_bits: u8,
}

/// The parameters of one offer or response, checked against RFC 7692 §7.1's grammar.
#[derive(Debug, Default)]
struct Parsed {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: Option<u8>,
    /// `Some(None)`: present without a value (allowed only in a client's offer).
    client_max_window_bits: Option<Option<u8>>,
}

impl Parsed {
    /// Rejects unknown or repeated parameters and values outside 8–15 (§7.1).
    fn from_offer(offer: &ExtensionOffer) -> Result<Parsed, String> {
        let mut p = Parsed::default();
        let mut seen: Vec<&str> = Vec::new();
        for (name, value) in &offer.params {
            if seen.contains(&name.as_str()) {
                return Err(format!("parameter {name} appears twice"));
            }
            seen.push(name);
            match (name.as_str(), value) {
                ("server_no_context_takeover", None) => p.server_no_context_takeover = true,
                ("client_no_context_takeover", None) => p.client_no_context_takeover = true,
                ("server_max_window_bits", Some(v)) => p.server_max_window_bits = Some(window_bits(v)?),
                ("client_max_window_bits", None) => p.client_max_window_bits = Some(None),
                ("client_max_window_bits", Some(v)) => p.client_max_window_bits = Some(Some(window_bits(v)?)),
                (name, _) => return Err(format!("unknown or malformed parameter {name}")),
            }
        }
        Ok(p)
    }
}

/// A window size: 1*DIGIT between 8 and 15, with no leading zero (§7.1.2.1). Digits only: Rust's
/// integer parser also takes a leading `+`.
fn window_bits(value: &str) -> Result<u8, String> {
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<u8>() {
        Ok(bits @ 8..=15) if digits && !value.starts_with('0') => Ok(bits),
        _ => Err(format!("window bits {value:?} outside 8..15")),
    }
}

impl DeflateConfig {
    /// The offer a client sends.
    pub fn client_offer(&self) -> ExtensionOffer {
        let mut params = Vec::new();
        if self.server_no_context_takeover {
            params.push(("server_no_context_takeover".into(), None));
        }
        if self.client_no_context_takeover {
            params.push(("client_no_context_takeover".into(), None));
        }
        if self.server_max_window_bits < 15 {
            params.push((
                "server_max_window_bits".into(),
                Some(self.server_max_window_bits.to_string()),
            ));
        }
        // Valueless: "we can limit our window if you want" (§7.1.2.2).
        let client_bits = (self.client_max_window_bits < 15).then(|| self.client_max_window_bits.to_string());
        params.push(("client_max_window_bits".into(), client_bits));
        ExtensionOffer {
            name: NAME.into(),
            params,
        }
    }

    /// A server's choice among a client's offers (§5.1): the first permessage-deflate offer it can
    /// accept, with the parameters agreed and the response to send. Offers it cannot honour
    /// (unknown or repeated parameters, invalid values) are declined and the next one is tried.
    pub fn accept_offers(&self, offers: &[ExtensionOffer]) -> Option<(DeflateParams, ExtensionOffer)> {
        offers
            .iter()
            .filter(|o| o.name.eq_ignore_ascii_case(NAME))
            .find_map(|o| self.accept_offer(o))
    }

    fn accept_offer(&self, offer: &ExtensionOffer) -> Option<(DeflateParams, ExtensionOffer)> {
        let asked = Parsed::from_offer(offer).ok()?;
        let mut params = Vec::new();
        let server_no_context_takeover = asked.server_no_context_takeover || self.server_no_context_takeover;
        if server_no_context_takeover {
            params.push(("server_no_context_takeover".into(), None));
        }
        // §7.1.1.2: a server may impose client_no_context_takeover even when not offered.
        let client_no_context_takeover = asked.client_no_context_takeover || self.client_no_context_takeover;
        if client_no_context_takeover {
            params.push(("client_no_context_takeover".into(), None));
        }
        // §7.1.2.1: answer a requested limit with the same or a smaller value.
        let server_bits = asked
            .server_max_window_bits
            .unwrap_or(15)
            .min(self.server_max_window_bits);
        if asked.server_max_window_bits.is_some() || server_bits < 15 {
            params.push(("server_max_window_bits".into(), Some(server_bits.to_string())));
        }
        // §7.1.2.2: the client's window can only be limited if it offered the parameter.
        let client_bits = match asked.client_max_window_bits {
            Some(limit) => {
                let bits = limit.unwrap_or(15).min(self.client_max_window_bits);
                if limit.is_some() || bits < 15 {
                    params.push(("client_max_window_bits".into(), Some(bits.to_string())));
                }
                bits
            }
            None => 15,
        };
        let agreed = DeflateParams {
            server_no_context_takeover,
            client_no_context_takeover,
            server_max_window_bits: server_bits,
            client_max_window_bits: client_bits,
        };
        Some((
            agreed,
            ExtensionOffer {
                name: NAME.into(),
                params,
            },
        ))
    }

    /// A client's check of the server's response (§7.1) to [`client_offer`](Self::client_offer).
    pub fn accept_response(&self, response: &ExtensionOffer) -> Result<DeflateParams, String> {
        let got = Parsed::from_offer(response)?;
        let server_bits = match got.server_max_window_bits {
            Some(bits) if bits > self.server_max_window_bits => {
                return Err(format!(
                    "server_max_window_bits={bits} exceeds the {} offered",
                    self.server_max_window_bits
                ));
            }
            Some(bits) => bits,
            None if self.server_max_window_bits < 15 => {
                return Err("server_max_window_bits was offered but not acknowledged".into());
            }
            None => 15,
        };
        let client_bits = match got.client_max_window_bits {
            Some(Some(bits)) => bits.min(self.client_max_window_bits),
            Some(None) => return Err("client_max_window_bits needs a value in a response".into()),
            None => self.client_max_window_bits,
        };
        Ok(DeflateParams {
            server_no_context_takeover: got.server_no_context_takeover,
            client_no_context_takeover: got.client_no_context_takeover || self.client_no_context_takeover,
            server_max_window_bits: server_bits,
            client_max_window_bits: client_bits,
        })
    }
}

/// Context takeover both ways, 15-bit windows: what most peers negotiate.
#[cfg(test)]
pub(super) const TAKEOVER_15: DeflateParams = DeflateParams {
    server_no_context_takeover: false,
    client_no_context_takeover: false,
    server_max_window_bits: 15,
    client_max_window_bits: 15,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extension::offer::parse_extensions;

    fn offer(s: &str) -> Vec<ExtensionOffer> {
        parse_extensions([s]).unwrap()
    }

    #[test]
    fn server_negotiates_each_parameter() {
        let c = DeflateConfig::default();
        let (p, r) = c
            .accept_offers(&offer("permessage-deflate; client_max_window_bits"))
            .unwrap();
        assert_eq!(r.to_string(), "permessage-deflate");
        assert_eq!((p.server_max_window_bits, p.client_max_window_bits), (15, 15));
        let (p, r) = c
            .accept_offers(&offer("permessage-deflate; server_max_window_bits=10; client_max_window_bits=9; server_no_context_takeover"))
            .unwrap();
        assert_eq!(
            r.to_string(),
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=10; client_max_window_bits=9"
        );
        assert_eq!(
            (
                p.server_max_window_bits,
                p.client_max_window_bits,
                p.server_no_context_takeover
            ),
            (10, 9, true)
        );
        // A server that wants small windows lowers them where the client allows it.
        let small = DeflateConfig {
            server_max_window_bits: 11,
            client_max_window_bits: 12,
            ..c.clone()
        };
        let (p, r) = small
            .accept_offers(&offer("permessage-deflate; client_max_window_bits"))
            .unwrap();
        assert_eq!(
            r.to_string(),
            "permessage-deflate; server_max_window_bits=11; client_max_window_bits=12"
        );
        assert_eq!((p.server_max_window_bits, p.client_max_window_bits), (11, 12));
    }

    #[test]
    fn server_declines_bad_offers_and_falls_back() {
        let c = DeflateConfig::default();
        for bad in [
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; server_max_window_bits=+10",
            "permessage-deflate; client_max_window_bits=\"+9\"",
            "permessage-deflate; client_no_context_takeover=1",
            "permessage-deflate; unknown",
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
            "x-other",
        ] {
            assert!(c.accept_offers(&offer(bad)).is_none(), "{bad}");
        }
        let (p, _) = c
            .accept_offers(&offer(
                "permessage-deflate; foo, permessage-deflate; server_max_window_bits=12",
            ))
            .unwrap();
        assert_eq!(p.server_max_window_bits, 12);
    }

    #[test]
    fn client_checks_the_response() {
        let c = DeflateConfig {
            server_max_window_bits: 12,
            ..DeflateConfig::default()
        };
        assert_eq!(
            c.client_offer().to_string(),
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits"
        );
        let ok = c
            .accept_response(
                &offer("permessage-deflate; server_max_window_bits=10; client_max_window_bits=9")[0],
            )
            .unwrap();
        assert_eq!((ok.server_max_window_bits, ok.client_max_window_bits), (10, 9));
        for bad in [
            "permessage-deflate; server_max_window_bits=13",
            "permessage-deflate",
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits",
            "permessage-deflate; server_max_window_bits=12; bogus",
            "permessage-deflate; server_max_window_bits=+12",
        ] {
            assert!(c.accept_response(&offer(bad)[0]).is_err(), "{bad}");
        }
    }
}
