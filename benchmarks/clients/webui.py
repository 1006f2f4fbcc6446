"""A web chat front end in a real browser: Open WebUI (from PyPI) pointed at the server, driven by Playwright
through Debian's headless Chromium; a conversation of two turns, screenshotted. Runs inside the driver's venv:
`python webui.py WEBUI_URL MODEL OUT_DIR` prints one JSON object."""

import json
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
TURNS = ["Write a Python function that reverses a string.", "Now add a docstring and type hints to it."]
# "tools": a question Open WebUI's built-in get_current_timestamp answers (it offers its 36 built-in tools natively),
# asked in a new chat each run: the model must call the tool, Open WebUI run it and the answer carry its result
TOOL_TURN, TOOL_RUNS = "What is the current date and time? Use your tools to find out.", 5


def wait_answer(page, turn: int, timeout_s: float = 300) -> str:
    """The assistant's text of ``turn`` once it stops changing (the stop button gone)."""
    deadline, last, stable = time.time() + timeout_s, None, 0
    while time.time() < deadline:
        answers = page.locator("#response-content-container")
        text = answers.nth(turn).inner_text() if answers.count() > turn else ""
        busy = page.locator("button[aria-label='Stop']").count() > 0 or page.locator(".stop-button").count() > 0
        stable = stable + 1 if text and text == last and not busy else 0
        if stable >= 3:
            return text
        last = text
        time.sleep(1)
    return last or ""


def dismiss_dialogs(page) -> None:
    """Close a first-run dialog (the release notes) the way a user does: its button, else Escape."""
    for _ in range(15):
        dialog = page.locator("div[role='dialog']")
        if dialog.count() == 0:
            return
        button = dialog.locator("button", has_text="Okay")
        if button.count():
            button.first.click()
        else:
            page.keyboard.press("Escape")
        time.sleep(1)


def main(url: str, model: str, out: Path, mode: str = "chat") -> dict:
    out.mkdir(parents=True, exist_ok=True)
    result = {"mode": mode, "turns": [], "screenshots": []}
    chats = [TURNS] if mode == "chat" else [[TOOL_TURN]] * TOOL_RUNS
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url, wait_until="domcontentloaded", timeout=180_000)
        page.keyboard.press("Escape")  # a first-run "what's new" dialog, if any
        box = page.locator("#chat-input")
        try:
            box.wait_for(timeout=180_000)
        except Exception:
            page.screenshot(path=str(out / "webui-no-input.png"), full_page=True)
            raise
        dismiss_dialogs(page)
        for run, turns in enumerate(chats):
            if run:  # a new chat: the page afresh
                page.goto(url, wait_until="domcontentloaded", timeout=180_000)
                box = page.locator("#chat-input")
                box.wait_for(timeout=180_000)
                dismiss_dialogs(page)
            for i, text in enumerate(turns):
                started = time.perf_counter()
                box.click()
                page.keyboard.type(text)
                page.keyboard.press("Enter")
                answer = wait_answer(page, i)
                shot = out / f"webui-{mode}{run + 1}-turn{i + 1}.png"
                page.screenshot(path=str(shot), full_page=True)
                result["turns"].append(
                    {"prompt": text, "answer": answer[:600], "wall_s": round(time.perf_counter() - started, 2)}
                )
                result["screenshots"].append(str(shot))
        browser.close()
    if mode == "chat":
        result["ok"] = all(t["answer"].strip() for t in result["turns"]) and "def " in result["turns"][0]["answer"]
    else:  # the tool's result (this year) in the answer, no call left unparsed in it
        for t in result["turns"]:
            raw = any(mark in t["answer"] for mark in ("<tool_call>", '"name":', "get_current_timestamp("))
            t["used_the_tool"] = time.strftime("%Y") in t["answer"] and not raw
        result["ok"] = all(t["used_the_tool"] for t in result["turns"])
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), *sys.argv[4:5])))
