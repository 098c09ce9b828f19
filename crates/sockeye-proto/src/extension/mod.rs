//! WebSocket extensions (RFC 6455 §9): parsing and writing `Sec-WebSocket-Extensions`.
//!
//! ```text
//! Sec-WebSocket-Extensions = extension-list
//! extension-list = 1#extension
//! extension = extension-token *( ";" extension-param )
//! extension-param = token [ "=" (token | quoted-string) ]
//! ```

#[cfg(feature = "deflate")]
pub mod deflate;
#[cfg(not(feature = "deflate"))]
#[path = "deflate_off.rs"]
pub mod deflate;
pub(crate) mod offer;

pub use offer::{ExtensionOffer, InvalidExtensionHeader, parse_extensions};

/// The `Sec-WebSocket-Extensions` value a client sends with `config` (`None`: offer nothing).
pub fn client_offer(config: &crate::config::Config) -> Option<String> {
    #[cfg(feature = "deflate")]
    if let Some(deflate) = &config.deflate {
        return Some(deflate.client_offer().to_string());
    }
    let _ = config;
    None
}

/// A client's check of the extensions a server accepted (RFC 6455 §9.1, RFC 7692 §7.1): the state
/// to install with [`Connection::set_deflate`](crate::Connection::set_deflate).
pub fn client_accept(
    config: &crate::config::Config,
    response: &http::HeaderMap,
) -> Result<Option<deflate::PerMessageDeflate>, crate::error::HandshakeError> {
    let accepted = crate::handshake::response_extensions(response)?;
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
    // `ClientHandshake::parse_response` already refused extensions that were not offered.
    let _ = (config, accepted);
    Ok(None)
}

/// A server's answer to a client's offers: the state to install and the
/// `Sec-WebSocket-Extensions` value for the 101 response, or `None` to use no extension.
pub fn server_accept(
    config: &crate::config::Config,
    offers: &[ExtensionOffer],
) -> Option<(deflate::PerMessageDeflate, String)> {
    #[cfg(feature = "deflate")]
    if let Some(ours) = &config.deflate {
        let (params, response) = ours.accept_offers(offers)?;
        return Some((
            deflate::PerMessageDeflate::new(crate::role::Role::Server, params, ours),
            response.to_string(),
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
                client_offer(&config).as_deref(),
                Some("permessage-deflate; client_max_window_bits")
            );
            assert!(server_accept(&config, &offers).is_some());
        } else {
            assert_eq!(size, 0, "the stand-in compiles away");
            assert_eq!(client_offer(&config), None);
            assert!(server_accept(&config, &offers).is_none());
        }
    }
}
