//! The server side of the opening handshake (RFC 6455 §4.2) on arbitrary bytes: the HTTP request
//! parser, the upgrade checks, extension negotiation and the response encoder never panic, and
//! every refusal has a response.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sockeye_proto::handshake::{ClientHello, encode_response, parse_request, reject_response};
use sockeye_proto::{Config, extension};

fuzz_target!(|data: &[u8]| {
    let config = { let mut c = Config::default(); c.max_handshake_size = 4096; c.max_handshake_headers = 32; c };
    let (request, n) = match parse_request(data, &config) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => {
            assert!(data.len() <= config.max_handshake_size, "an oversized head must be refused");
            return;
        }
        Err(e) => {
            let response = reject_response(&e);
            assert!(response.status().is_client_error() || response.status().is_server_error());
            let _ = encode_response(&response);
            return;
        }
    };
    assert!(n <= data.len() && n <= config.max_handshake_size);
    match ClientHello::from_request(&request) {
        Ok(hello) => {
            let _ = hello.choose_subprotocol(&["chat", "superchat"]);
            let (response, extensions) = hello.accept_with(&config);
            if let Some(value) = response.headers().get("sec-websocket-extensions") {
                // What we answer must itself parse as an extension list.
                let value = value.to_str().expect("our own answer is ASCII");
                let parsed = extension::parse_extensions(std::iter::once(value));
                assert!(parsed.is_ok(), "our own answer {value:?} does not parse");
            }
            let encoded = encode_response(&response);
            assert!(encoded.starts_with(b"HTTP/1.1 101 "));
            // The answer as sent names what was negotiated: the state is kept.
            let kept = extensions.kept_by(&response).is_some();
            assert_eq!(kept, response.headers().contains_key("sec-websocket-extensions"));
        }
        Err(e) => {
            let _ = encode_response(&reject_response(&e));
        }
    }
});
