"""A third-party client of the pub/sub protocol (docs/pubsub-protocol.md), with no Sockeye code:
Python's `websockets`. Two nodes of one cluster, A and B:

1. `alice` on A subscribes to `user/alice` and `global`; `bob` on B subscribes to `global`.
2. `alice` publishes on `global`: `bob` receives it, `alice` does not (a publisher does not get
   its own publications back).
3. `alice` disconnects; `bob` publishes 3 messages on `global` and 2 on `user/alice`.
4. `alice` reconnects to B with `since` for each topic: she receives exactly the 5 she missed,
   once each, in order, with `recovery: "recovered"`, then a live one.

Usage: python3 pubsub_client.py ws://127.0.0.1:PORT_A/ ws://127.0.0.1:PORT_B/
Prints PASS or raises.
"""
import asyncio
import json
import sys

import websockets

WAIT = 10


async def request(ws, frame):
    await ws.send(json.dumps(frame))


async def expect(ws, kind, **fields):
    """The next frame, which must be of type `kind` with these fields."""
    frame = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
    assert frame["type"] == kind, f"expected {kind}, got {frame}"
    for key, value in fields.items():
        assert frame.get(key) == value, f"{key}: expected {value!r} in {frame}"
    return frame


async def quiet(ws, seconds=0.3):
    """Nothing more arrives for a while."""
    try:
        frame = await asyncio.wait_for(ws.recv(), seconds)
    except asyncio.TimeoutError:
        return
    raise AssertionError(f"unexpected frame: {frame}")


async def main(url_a, url_b):
    positions = {}
    async with websockets.connect(url_b) as bob:
        await request(bob, {"type": "subscribe", "topic": "global", "id": "b1"})
        await expect(bob, "subscribed", topic="global", recovery="live", id="b1")

        async with websockets.connect(url_a) as alice:
            for i, topic in enumerate(["user/alice", "global"]):
                await request(alice, {"type": "subscribe", "topic": topic, "id": i})
                await expect(alice, "subscribed", topic=topic, recovery="live", id=i)
            await request(alice, {"type": "publish", "topic": "global", "data": {"hello": "from alice"}, "id": 9})
            ack = await expect(alice, "published", topic="global", id=9)
            positions["global"] = {"offset": ack["offset"], "epoch": ack["epoch"]}
            got = await expect(bob, "message", topic="global", data={"hello": "from alice"})
            assert got["offset"] == ack["offset"] and got["epoch"] == ack["epoch"], (got, ack)
            # A publish on user/alice before she leaves, so that she holds a position there too.
            await request(bob, {"type": "publish", "topic": "user/alice", "data": "welcome", "id": "w"})
            await expect(bob, "published", topic="user/alice", id="w")
            m = await expect(alice, "message", topic="user/alice", data="welcome")
            positions["user/alice"] = {"offset": m["offset"], "epoch": m["epoch"]}
            await quiet(alice)

        missed = {"global": [f"g{i}" for i in range(3)], "user/alice": [f"u{i}" for i in range(2)]}
        for topic, items in missed.items():
            for n, data in enumerate(items):
                await request(bob, {"type": "publish", "topic": topic, "data": data, "id": f"{topic}{n}"})
                await expect(bob, "published", topic=topic, id=f"{topic}{n}")
        # bob's own publications on global are not sent back to him.
        await quiet(bob)

    async with websockets.connect(url_b) as alice:
        for topic in ["user/alice", "global"]:
            await request(alice, {"type": "subscribe", "topic": topic, "since": positions[topic], "id": topic})
            await expect(alice, "subscribed", topic=topic, recovery="recovered", recovered=len(missed[topic]), id=topic)
            for data in missed[topic]:
                await expect(alice, "message", topic=topic, data=data)
        await quiet(alice)
        async with websockets.connect(url_a) as carol:
            await request(carol, {"type": "publish", "topic": "global", "data": "live", "id": 1})
            await expect(carol, "published", topic="global", id=1)
            await expect(alice, "message", topic="global", data="live")
        # Errors concern one request; the connection stays up.
        await alice.send("not json")
        await expect(alice, "error", code="bad_json")
        await request(alice, {"type": "subscribe", "topic": "", "id": 5})
        await expect(alice, "error", code="invalid_topic", id=5)
        await request(alice, {"type": "unsubscribe", "topic": "global", "id": 6})
        await expect(alice, "unsubscribed", topic="global", id=6)
    print("PASS")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
