"""Python `websockets` as an echo server for Sockeye's client.
Usage: server.py PORT [--no-deflate] [--tls CERT KEY]"""
import asyncio
import ssl
import sys

from websockets.asyncio.server import serve


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def main(port, deflate, tls):
    context = None
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
    async with serve(echo, "127.0.0.1", port, compression="deflate" if deflate else None,
                     ssl=context, max_size=16 << 20):
        print(f"python websockets echo server on {port}", flush=True)
        await asyncio.get_running_loop().create_future()


if __name__ == "__main__":
    args = sys.argv[1:]
    tls = None
    if "--tls" in args:
        i = args.index("--tls")
        tls = (args[i + 1], args[i + 2])
    asyncio.run(main(int(args[0]), "--no-deflate" not in args, tls))
