"""The package's import graph (every import, also those inside functions) has no cycle."""

import ast

from support.package import package_sources


def import_graph() -> dict[str, set[str]]:
    modules = package_sources()
    graph = {}
    for name, source in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
                targets.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_has_modules_and_edges():
    graph = import_graph()
    assert "localspec.engine.loop" in graph and "localspec.engine.verify" in graph["localspec.engine.loop"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_registry_imports_no_chat_storage():
    assert "localspec.chat.store" not in import_graph()["localspec.models.registry"]


# what the user-facing front ends may not reach into: they go through localspec.session (and config)
INTERNALS = ("engine", "sampling", "drafters", "backends")
FRONT_ENDS = ("apps.tui", "bench.run", "apps.cli", "apps.server")
# ...but for what a front end shows or runs as a command of its own: a turn's stats, `calibrate`, the converters
OPEN = {
    "localspec.engine.stats",
    "localspec.engine.calibrate",
    "localspec.backends.gguf_meta",
    "localspec.drafters.eagle.gguf",
    "localspec.drafters.dflash.gguf",
}
# ...and for the command line's flags, made from the drafter table and the sampling defaults
FLAGS_FROM = {"localspec.drafters.table", "localspec.sampling"}


def front_end_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    def under(module: str, names) -> bool:
        return any(module == f"localspec.{n}" or module.startswith(f"localspec.{n}.") for n in names)

    return sorted(
        (m, t)
        for m, targets in graph.items()
        if under(m, FRONT_ENDS)
        for t in targets
        if under(t, INTERNALS) and t not in OPEN and not (under(m, ["apps.cli"]) and t in FLAGS_FROM)
    )


def test_front_ends_use_the_session_not_the_internals():
    assert front_end_violations(import_graph()) == []


def test_the_contract_check_catches_a_violation():
    graph = {"localspec.apps.tui.app": {"localspec.drafters.table", "localspec.session"}, "localspec.session": set()}
    assert front_end_violations(graph) == [("localspec.apps.tui.app", "localspec.drafters.table")]


def test_the_registry_knows_no_drafter_code():
    graph = import_graph()
    assert not [t for t in graph["localspec.models.registry"] if t.startswith("localspec.drafters")]
