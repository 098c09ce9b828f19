//! Bytes a Sockeye server connection holds for permessage-deflate, after one 4 KiB JSON-like
//! message each way, for several negotiations. Measured with a counting allocator.


use sockeye_proto::extension::deflate::DeflateConfig;
use sockeye_proto::handshake::{ClientHandshake, ClientHello, encode_response};
use sockeye_proto::{Config, Connection, Message};

mod counting;

#[global_allocator]
static A: counting::Counting = counting::Counting;

fn main() {
    let text: String = (0..200).map(|i| format!(r#"{{"id":{i},"v":"x{}"}},"#, i * 7919 % 1000)).collect();
    let cases = [
        ("window 15, context takeover (default)", DeflateConfig::default()),
        ("window 15, no context takeover", DeflateConfig::default().server_no_context_takeover(true).client_no_context_takeover(true)),
        ("window 12, context takeover", DeflateConfig::default().server_max_window_bits(12).client_max_window_bits(12)),
        ("window 9, no context takeover", DeflateConfig::default().server_max_window_bits(9).client_max_window_bits(9).server_no_context_takeover(true).client_no_context_takeover(true)),
    ];
    println!("| negotiation | server connection, idle | after 1 message each way |");
    println!("|---|---|---|");
    for (name, deflate) in cases {
        let cc = { let mut c = Config::default(); c.deflate = Some(deflate.clone()); c };
        let sc = { let mut c = Config::default(); c.deflate = Some(deflate); c };
        let request = http::Request::get("ws://example.com/").body(()).unwrap();
        let handshake = ClientHandshake::new(request, [7; 16], &cc).unwrap();
        let hello = ClientHello::from_request(handshake.request()).unwrap();
        let (response, extensions) = hello.accept_with(&sc);
        let before = counting::live();
        let mut server = Connection::server(sc);
        server.set_deflate(extensions.kept_by(&response));
        let idle = counting::live() - before;
        let client_state = handshake.parse_response(&encode_response(&response), &cc).unwrap().unwrap().0.deflate;
        let mut client = Connection::client(cc, sockeye_proto::frame::insecure_mask_keys_for_tests(1));
        client.set_deflate(client_state);
        let before_client = counting::live();
        client.send(Message::text(text.clone())).unwrap();
        let wire = client.transmit_bytes();
        let client_cost = counting::live() - before_client;
        server.receive(&wire);
        let got = server.poll_message().unwrap().unwrap();
        server.send(got).unwrap();
        drop(server.transmit_bytes());
        let after = counting::live() - before - client_cost;
        println!("| {name} | {} B | {} KiB |", idle, after / 1024);
    }
}
