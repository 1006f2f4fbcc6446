"""Driving the Textual chat in tests: typing a message and waiting for a condition."""

import time


async def wait_for(pilot, condition, timeout=10.0):
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.05)


async def send(pilot, app, text):
    inp = app.query_one("#input")
    inp.text = text
    await pilot.press("enter")
