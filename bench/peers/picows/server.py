"""picows as a benchmark server: server.py echo|push PORT [N]
BENCH_TLS=DIR serves wss:// with DIR/cert.pem and DIR/key.pem."""
import asyncio
import os
import ssl
import sys

from picows import WSListener, WSMsgType, ws_create_server

MODE, PORT = sys.argv[1], int(sys.argv[2])
N = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000


class Echo(WSListener):
    def on_ws_connected(self, transport):
        if MODE == "push":
            for _ in range(N):
                transport.send(WSMsgType.TEXT, b"yo")
            transport.send_close()

    def on_ws_frame(self, transport, frame):
        if frame.msg_type in (WSMsgType.TEXT, WSMsgType.BINARY):
            transport.send(frame.msg_type, frame.get_payload_as_bytes())
        elif frame.msg_type == WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code(), frame.get_close_message())
            transport.disconnect()


async def main():
    kwargs = {}
    if os.environ.get("BENCH_TLS"):
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls = os.environ["BENCH_TLS"]
        context.load_cert_chain(f"{tls}/cert.pem", f"{tls}/key.pem")
        kwargs["ssl"] = context
    server = await ws_create_server(lambda _request: Echo(), "127.0.0.1", PORT,
                                    max_frame_size=64 << 20, **kwargs)
    print("ready", flush=True)
    await server.serve_forever()


asyncio.run(main())
