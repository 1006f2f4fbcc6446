"""Layout snapshots at 80x24 and 120x40 (pytest-textual-snapshot; `pytest --snapshot-update` rewrites them
after an intended change — look at the SVGs before committing). Only deterministic content is shown: a
resumed chat, no timings."""

import pytest
from support.fakes import ScriptedBackend

from localspec.apps.tui.app import ChatApp
from localspec.chat.conversation import Conversation
from localspec.chat.store import SavedChat
from localspec.drafters.table import DrafterSetup
from localspec.engine.speclen import FixedK
from localspec.sampling import SamplingParams
from localspec.session import Session

ANSWER = """Here is a function:

```python
def add(a, b):
    return a + b
```

It returns the **sum** of `a` and `b`."""


def make_app():
    chat = SavedChat("snapshot", "scripted-model", Conversation())
    chat.add("user", "Write add() in Python.")
    chat.add("assistant", ANSWER, {"generated_tokens": 30})
    backend = ScriptedBackend(n_ctx=4096)

    def open_session(progress):
        return Session(
            backend, DrafterSetup().build("ngram"), SamplingParams(temperature=0), "scripted-model", speclen=FixedK(4)
        )

    app = ChatApp(open_session, chat, save_dir=None)
    app.memory_mb = lambda: 123.0
    app._save = lambda: None  # nothing written by a snapshot
    return app


async def settle(pilot):
    while pilot.app.session is None:
        await pilot.pause(0.05)
    await pilot.pause(0.2)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_layout(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=size, run_before=settle)
