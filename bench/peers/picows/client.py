"""picows as a push client: client.py ADDR N — receives N text messages "yo", prints one JSON
line (msgs/s from the first message)."""
import asyncio
import json
import sys
import time

from picows import WSListener, WSMsgType, ws_connect

ADDR, N = sys.argv[1], int(sys.argv[2])


class Counter(WSListener):
    def __init__(self):
        self.count = 0
        self.started = None
        self.finished = None

    def on_ws_frame(self, transport, frame):
        if frame.msg_type == WSMsgType.TEXT:
            if frame.get_payload_as_bytes() != b"yo":
                raise ValueError("unexpected message")
            if self.started is None:
                self.started = time.perf_counter()
            self.count += 1
            if self.count == N:
                self.finished = time.perf_counter()
                transport.disconnect()
        elif frame.msg_type == WSMsgType.CLOSE:
            transport.disconnect()


async def main():
    transport, client = await ws_connect(Counter, f"ws://{ADDR}/")
    await transport.wait_disconnected()
    if client.count != N:
        sys.exit(f"received {client.count} of {N}")
    secs = client.finished - client.started
    print(json.dumps({"msgs_per_s": round(N / secs), "messages": N, "seconds": secs}))


asyncio.run(main())
