#!/usr/bin/env python3
"""Writes the hand-built seed corpus into fuzz/corpus/<target>/ (idempotent).

Seeds are valid and near-valid inputs from RFC 6455 and RFC 7692 (the §5.7 examples, every
length encoding, handshakes with and without extensions) so the fuzzer starts deep in the parsers.
"""
import base64, hashlib, os, struct, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def frame(opcode, payload, fin=True, rsv=0, mask=None, length_form=None):
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    form = length_form or (7 if n < 126 else 16 if n < 65536 else 64)
    m = 0x80 if mask else 0
    if form == 7:
        head = bytes([b0, m | n])
    elif form == 16:
        head = bytes([b0, m | 126]) + struct.pack(">H", n)
    else:
        head = bytes([b0, m | 127]) + struct.pack(">Q", n)
    if mask:
        head += mask
        payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return head + payload


def frames():
    key = bytes([0x37, 0xFA, 0x21, 0x3D])
    # RFC 6455 §5.7 examples.
    write("frame_header", "hello-unmasked", bytes.fromhex("810548656c6c6f"))
    write("frame_header", "hello-masked", bytes.fromhex("818537fa213d7f9f4d5158"))
    write("frame_header", "fragments", bytes.fromhex("010348656c80026c6f"))
    write("frame_header", "ping", bytes.fromhex("890548656c6c6f"))
    write("frame_header", "len16", frame(2, b"\x00" * 256)[:8])
    write("frame_header", "len64", frame(2, b"\x00" * 65536)[:14])
    write("frame_header", "len64-masked", frame(2, b"", mask=key, length_form=64))
    write("frame_header", "close", frame(8, struct.pack(">H", 1000) + b"bye", mask=key))
    write("frame_header", "rsv1", frame(1, b"x", rsv=4))
    write("frame_header", "reserved-opcode", frame(3, b""))


def request(extra=b""):
    return (b"GET /chat?x=1 HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\n"
            b"Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\nOrigin: http://example.com\r\n" + extra + b"\r\n")


def requests():
    write("handshake_request", "plain", request())
    write("handshake_request", "protocols", request(b"Sec-WebSocket-Protocol: chat, superchat\r\n"))
    write("handshake_request", "deflate", request(
        b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"))
    write("handshake_request", "deflate-params", request(
        b"Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=10; "
        b"client_max_window_bits=\"12\"; server_no_context_takeover, permessage-deflate, x-webkit\r\n"))
    write("handshake_request", "version-8", request().replace(b"Version: 13", b"Version: 8"))
    write("handshake_request", "post", request().replace(b"GET", b"POST"))
    write("handshake_request", "leftover", request() + bytes.fromhex("818537fa213d7f9f4d5158"))


def responses():
    # The fuzz target's fixed nonce is bytes 0..16.
    key = base64.b64encode(bytes(range(16)))
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    head = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n")
    write("handshake_response", "plain", head + b"\r\n")
    write("handshake_response", "protocol", head + b"Sec-WebSocket-Protocol: chat\r\n\r\n")
    write("handshake_response", "deflate", head + b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
    write("handshake_response", "deflate-params", head + (
        b"Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; "
        b"client_max_window_bits=9\r\n\r\n"))
    write("handshake_response", "leftover", head + b"\r\n" + bytes.fromhex("810548656c6c6f"))
    write("handshake_response", "refused", b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")


def pubsub_requests():
    # One of each request of docs/pubsub-protocol.md, and near misses.
    for name, text in [
        ("subscribe", '{"type":"subscribe","topic":"user/42","id":1}'),
        ("resume", '{"type":"subscribe","topic":"global","since":{"offset":17,"epoch":"9f3c:2"},"id":"a"}'),
        ("unsubscribe", '{"type":"unsubscribe","topic":"global"}'),
        ("publish", '{"type":"publish","topic":"chat","data":{"text":"hi \\u00e9","n":[1,2.5e3,null]},"id":3}'),
        ("publish-null", '{"type":"publish","topic":"t","data":null}'),
        ("unknown", '{"type":"dance","id":{}}'),
        ("escapes", '{"type":"subscribe","topic":"a\\/b\\ud83d\\ude00"}'),
    ]:
        write("pubsub_request", name, text.encode())


if __name__ == "__main__":
    frames()
    requests()
    responses()
    pubsub_requests()
    sys.exit(0)
