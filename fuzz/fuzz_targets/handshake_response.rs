//! The client side of the opening handshake (RFC 6455 §4.1) on arbitrary bytes: the response
//! parser and the extension checks never panic. The request offers a subprotocol and
//! permessage-deflate, so the fuzzer can reach every acceptance check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sockeye_proto::handshake::ClientHandshake;
use sockeye_proto::Config;

fuzz_target!(|data: &[u8]| {
    let config = { let mut c = Config::default(); c.max_handshake_size = 4096; c.max_handshake_headers = 32; c };
    let request = http::Request::get("ws://example.com/chat")
        .header("sec-websocket-protocol", "chat, superchat")
        .body(())
        .expect("valid request");
    // A fixed nonce: the key is "AAECAwQFBgcICQoLDA0ODw==", which seeds can answer. The
    // handshake offers permessage-deflate (the default config) and checks the answer's parameters.
    let nonce = std::array::from_fn(|i| i as u8);
    let handshake = ClientHandshake::new(request, nonce, &config).expect("valid request");
    let _ = handshake.encode_request();
    match handshake.parse_response(data, &config) {
        Ok(Some((accepted, n))) => {
            assert!(n <= data.len() && n <= config.max_handshake_size);
            assert_eq!(accepted.response.status(), 101);
        }
        Ok(None) => assert!(data.len() <= config.max_handshake_size),
        Err(_) => {}
    }
});
