"""Python `websockets` as a client of a Sockeye echo server: text and binary messages around every
frame length boundary must come back unchanged. Usage: client.py URL [--no-deflate] [--ca PEM]"""
import asyncio
import ssl
import sys

from websockets.asyncio.client import connect


async def main(url, deflate, ca):
    context = ssl.create_default_context(cafile=ca) if url.startswith("wss://") else None
    async with connect(url, compression="deflate" if deflate else None, ssl=context,
                       max_size=16 << 20, open_timeout=10) as ws:
        negotiated = ws.response.headers.get("Sec-WebSocket-Extensions") or "none"
        if deflate != ("permessage-deflate" in negotiated):
            sys.exit(f"FAIL: extensions {negotiated} with deflate={deflate}")
        checked = 0
        for size in [0, 1, 125, 126, 65535, 65536, 1 << 20]:
            text = "".join(chr(97 + i % 26) for i in range(size))
            binary = bytes(i * 7 % 256 for i in range(size))
            for message in (text, binary):
                await ws.send(message)
                echo = await asyncio.wait_for(ws.recv(), 20)
                if echo != message:
                    sys.exit(f"FAIL: echo of a {size}-byte message differs")
                checked += 1
        await ws.close(1000, "done")
        print(f"PASS {checked} echoes (extensions: {negotiated}), close {ws.close_code}")


if __name__ == "__main__":
    args = sys.argv[1:]
    ca = args[args.index("--ca") + 1] if "--ca" in args else None
    asyncio.run(main(args[0], "--no-deflate" not in args, ca))
