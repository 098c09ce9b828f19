//! WebSocket extensions (RFC 6455 §9): parsing and writing `Sec-WebSocket-Extensions`.
//!
//! ```text
//! Sec-WebSocket-Extensions = extension-list
//! extension-list = 1#extension
//! extension = extension-token *( ";" extension-param )
//! extension-param = token [ "=" (token | quoted-string) ]
//! ```
//!
//! Negotiation happens inside the opening handshake (`handshake/`), as RFC 6455 §9.1 places it:
//! the client's request carries the offers, the server's response the ones it accepted, and
//! both ends come out of it with the state to install. This module says which extensions this
//! crate speaks (permessage-deflate, RFC 7692, when the `deflate` feature is on) and how each
//! side answers; the handshake calls it.

#[cfg(feature = "deflate")]
pub mod deflate;
#[cfg(not(feature = "deflate"))]
#[path = "deflate_off.rs"]
pub mod deflate;
pub(crate) mod offer;

pub use offer::{ExtensionOffer, InvalidExtensionHeader, parse_extensions};

/// The extensions a client offers with `config` (RFC 6455 §9.1): permessage-deflate's offer
/// (RFC 7692 §5) when it is configured and compiled in, else none. The handshake puts it in the
/// request ([`ClientHandshake::new`](crate::handshake::ClientHandshake::new),
/// [`extended_connect_request`](crate::handshake::extended_connect_request)).
pub(crate) fn client_offer(config: &crate::config::Config) -> Option<ExtensionOffer> {
    #[cfg(feature = "deflate")]
    if let Some(deflate) = &config.deflate {
        return Some(deflate.client_offer());
    }
    let _ = config;
    None
}

/// A client's check of the extensions a server's response `accepted` (RFC 6455 §9.1, RFC 7692
/// §7.1), once the handshake has refused any it did not offer: the state to install with
/// [`Connection::set_deflate`](crate::Connection::set_deflate).
pub(crate) fn client_accept(
    config: &crate::config::Config,
    accepted: &[ExtensionOffer],
) -> Result<Option<deflate::PerMessageDeflate>, crate::error::HandshakeError> {
    #[cfg(feature = "deflate")]
    if let Some(ours) = &config.deflate {
        let mut found = accepted
            .iter()
            .filter(|e| e.name.eq_ignore_ascii_case(deflate::NAME));
        let Some(response) = found.next() else {
            return Ok(None);
        };
        if found.next().is_some() {
            return Err(crate::error::HandshakeError::ExtensionRejected(
                "permessage-deflate accepted twice".into(),
            ));
        }
        let params = ours
            .accept_response(response)
            .map_err(crate::error::HandshakeError::ExtensionRejected)?;
        return Ok(Some(deflate::PerMessageDeflate::new(
            crate::role::Role::Client,
            params,
            ours,
        )));
    }
    // The handshake already refused extensions that were not offered.
    let _ = (config, accepted);
    Ok(None)
}

/// A server's answer to a client's offers (RFC 7692 §5.1): the state to install and the
/// extension to name in the accepting response, or `None` to use no extension.
pub(crate) fn server_accept(
    config: &crate::config::Config,
    offers: &[ExtensionOffer],
) -> Option<(deflate::PerMessageDeflate, ExtensionOffer)> {
    #[cfg(feature = "deflate")]
    if let Some(ours) = &config.deflate {
        let (params, response) = ours.accept_offers(offers)?;
        return Some((
            deflate::PerMessageDeflate::new(crate::role::Role::Server, params, ours),
            response,
        ));
    }
    let _ = (config, offers);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `deflate` off the state is the uninhabited stand-in: the connection's
    /// `Option<PerMessageDeflate>` takes no space, and nothing is offered or accepted. With it on,
    /// the state is the real compressor. Run under both feature sets.
    #[test]
    fn the_deflate_state_follows_the_feature() {
        let size = std::mem::size_of::<Option<deflate::PerMessageDeflate>>();
        let config = crate::config::Config::default();
        let offers = parse_extensions(["permessage-deflate"]).unwrap();
        if cfg!(feature = "deflate") {
            assert!(size > 0);
            assert_eq!(
                client_offer(&config).map(|o| o.to_string()).as_deref(),
                Some("permessage-deflate; client_max_window_bits")
            );
            assert!(server_accept(&config, &offers).is_some());
        } else {
            assert_eq!(size, 0, "the stand-in compiles away");
            assert_eq!(client_offer(&config), None::<ExtensionOffer>);
            assert!(server_accept(&config, &offers).is_none());
        }
    }
}
