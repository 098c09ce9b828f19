//! What the stateful targets share: negotiated deflate parameters from fuzz input.

use arbitrary::Arbitrary;
use sockeye_proto::extension::deflate::{DeflateConfig, DeflateParams, PerMessageDeflate};
use sockeye_proto::Role;

/// permessage-deflate parameters as negotiated (RFC 7692 §7.1), window bits folded into 8..=15.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Negotiated {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: u8,
    client_max_window_bits: u8,
    level: u8,
    min_compress_size: u8,
}

impl Negotiated {
    pub fn state(self, role: Role) -> PerMessageDeflate {
        let params = DeflateParams {
            server_no_context_takeover: self.server_no_context_takeover,
            client_no_context_takeover: self.client_no_context_takeover,
            server_max_window_bits: 8 + self.server_max_window_bits % 8,
            client_max_window_bits: 8 + self.client_max_window_bits % 8,
        };
        let config = DeflateConfig::default()
            .level(u32::from(self.level % 10))
            .min_compress_size(usize::from(self.min_compress_size));
        PerMessageDeflate::new(role, params, &config)
    }
}
