"""The layout's rules (docs/design.md, Layout), checked on the package's source by walking its syntax trees:

- engine/ imports no drafter family, chat/, apps/ or bench/; backends/ imports no drafters/; drafters/ imports
  no train/, bench/, apps/ or engine/; models/ imports no drafters/ or bench/; a drafter family imports no
  other; only apps/ imports apps/ (and `python -m localspec`, its door);
- no module imports another module's _private name, or reads one off an imported module;
- nothing outside backends/ reads a backend's _private attribute;
- nothing reads a backend's attribute with getattr/hasattr (declare it on Backend or in Capabilities);
- nothing compares a backend's name (a drafter picks its head per backend through its table row).

Each rule is also shown to fail on a planted violation."""

from __future__ import annotations

import ast

import pytest
from support.package import ROOT, package_sources

FAMILIES = ("suffix", "lookahead", "eagle", "dflash", "mtp", "multihead")
# what each wing may not import: (importer prefix, forbidden prefixes)
FORBIDDEN = [
    (
        "localspec.engine",
        ["localspec.chat", "localspec.apps", "localspec.bench"] + [f"localspec.drafters.{f}" for f in FAMILIES],
    ),
    ("localspec.backends", ["localspec.drafters"]),
    ("localspec.drafters", ["localspec.train", "localspec.bench", "localspec.apps", "localspec.engine"]),
    ("localspec.models", ["localspec.drafters", "localspec.bench"]),
]
# a family imports no other family: what they share lives in drafters/heads/ (the feature-fed drafter, the
# one-layer torch head EAGLE-1 and MiMo's MTP layer are), drafters/picking.py
APPS_DOORS = ("localspec.apps", "localspec.__main__")
BACKENDISH = ("backend", "target", "draft", "draft_backend", "model_backend")  # names a Backend goes by


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def is_backendish(node: ast.AST) -> bool:
    """`backend`, `target`, `self.target`, `self._backend`... : an expression that holds a Backend by its name."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name is not None and name.lstrip("_") in BACKENDISH


def imported_modules(tree: ast.AST, known: set[str]) -> dict[str, str]:
    """Local names bound to localspec modules: `import localspec.x as y`, `from localspec.x import module`."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({a.asname: a.name for a in node.names if a.asname and a.name in known})
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if f"{node.module}.{a.name}" in known:
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def import_violations(module: str, tree: ast.AST, known: set[str]) -> list[str]:
    found = []
    for node in ast.walk(tree):
        targets, privates = [], []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in known:
                targets.append(node.module)
                privates = [a.name for a in node.names if _private(a.name) and node.module != module]
            targets += [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name in known]
        found += [f"{module}: imports the private {node.module}.{p}" for p in privates]
        for target in targets:
            for importer, banned in FORBIDDEN:
                if under(module, importer) and any(under(target, b) for b in banned):
                    found.append(f"{module}: {importer.split('.')[-1]}/ may not import {target}")
            found += family_violation(module, target)
            if under(target, "localspec.apps") and not any(under(module, d) for d in APPS_DOORS):
                found.append(f"{module}: only apps/ imports apps/ ({target})")
    return found


def family_of(module: str) -> str | None:
    return next((f for f in FAMILIES if under(module, f"localspec.drafters.{f}")), None)


def family_violation(module: str, target: str) -> list[str]:
    mine, theirs = family_of(module), family_of(target)
    if mine and theirs and mine != theirs:
        return [f"{module}: the {mine} family may not import another family ({target})"]
    return []


def private_read(module: str, node: ast.AST, modules: dict[str, str]) -> str | None:
    if not (isinstance(node, ast.Attribute) and _private(node.attr)):
        return None
    if isinstance(node.value, ast.Name) and modules.get(node.value.id, module) != module:
        return f"reads the private {modules[node.value.id]}.{node.attr}"
    if is_backendish(node.value) and not under(module, "localspec.backends"):
        return f"reads a backend's private {ast.unparse(node)}"
    return None


def backend_getattr(node: ast.AST) -> str | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
        and is_backendish(node.args[0])
    ):
        return f"{node.func.id} on a backend ({ast.unparse(node)})"
    return None


def backend_name_comparison(node: ast.AST) -> str | None:
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if any(isinstance(s, ast.Attribute) and s.attr == "name" and is_backendish(s.value) for s in sides):
            return f"compares a backend's name ({ast.unparse(node)})"
    return None


def use_violations(module: str, tree: ast.AST, known: set[str]) -> list[str]:
    modules = imported_modules(tree, known)
    found = []
    for node in ast.walk(tree):
        for problem in (private_read(module, node, modules), backend_getattr(node), backend_name_comparison(node)):
            if problem:
                found.append(f"{module}:{node.lineno}: {problem}")
    return found


def layout_violations(sources: dict[str, str]) -> list[str]:
    known = set(sources)
    found = []
    for module, source in sorted(sources.items()):
        tree = ast.parse(source)
        found += import_violations(module, tree, known) + use_violations(module, tree, known)
    return found


def test_the_package_keeps_the_layout_rules():
    assert layout_violations(package_sources()) == []


def test_the_wings_are_folders():
    wings = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"engine", "backends", "drafters", "chat", "models", "train", "bench", "apps"} <= wings
    assert {f for f in FAMILIES if (ROOT / "drafters" / f / "drafter.py").exists()} == set(FAMILIES)


def class_methods(path, name: str) -> list[str]:
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return [n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_the_session_keeps_the_chat_and_each_command_is_a_module():
    """Session: the chat's methods only (--exact is engine/exact.py's Exact, the server's prompts
    chat/model_text.py, bench's runners bench/runners.py); the CLI: one module a command, its parser and its run."""
    methods = class_methods(ROOT / "session.py", "Session")
    assert len(methods) <= 20, methods
    commands = [p for p in (ROOT / "apps" / "cli").glob("*.py") if p.stem not in ("__init__", "flags", "common")]
    assert len(commands) >= 14
    for path in commands:
        defined = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
        assert path.stem == "quants" or {"add_parser", "run"} <= defined, path.name


def class_members(path, name: str) -> list[str]:
    """The public names a class defines: methods, properties and annotated or assigned attributes."""
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == name)
    names = [n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    names += [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    names += [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def test_the_backend_keeps_the_cache_and_the_forward_pass():
    """Backend: the cache, the forward pass and what they need; the vocabulary is its Tokenizer
    (backends/tokenizer.py), the report facts a frozen ModelInfo, what it offers its Capabilities."""
    members = class_members(ROOT / "backends" / "base.py", "Backend")
    assert len(members) <= 30, members
    assert {"tokenizer", "info", "capabilities", "forward", "truncate"} <= set(members)
    assert not {"tokenize", "token_bytes", "chat_tokens", "eog_tokens", "placement", "train_ctx"} & set(members)
    tokenizer = class_members(ROOT / "backends" / "tokenizer.py", "Tokenizer")
    assert {"tokenize", "token_bytes", "chat_tokens", "fim_tokens", "grammar_tokenizer", "eog_tokens"} <= set(tokenizer)
    for path, name in (
        (ROOT / "backends" / "torch" / "hf.py", "HfTokenizer"),
        (ROOT / "backends" / "llama_cpp" / "vocab.py", "LlamaVocab"),
    ):
        cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == name)
        assert [b.id for b in cls.bases] == ["Tokenizer"], name


PLANTED = {
    "an upward import": (
        "localspec.engine.loop",
        "from localspec.chat.conversation import Conversation\n",
        "engine/ may not import localspec.chat.conversation",
    ),
    "a drafter family in the engine": (
        "localspec.engine.loop",
        "from localspec.drafters.suffix import drafter\n",
        "engine/ may not import localspec.drafters.suffix.drafter",
    ),
    "a backend importing a drafter": (
        "localspec.backends.base",
        "import localspec.drafters.ngram as ngram\n",
        "backends/ may not import localspec.drafters.ngram",
    ),
    "the engine in a drafter": (
        "localspec.drafters.base",
        "from localspec.engine.speclen import AdaptiveK\n",
        "drafters/ may not import localspec.engine.speclen",
    ),
    "a drafter in models": (
        "localspec.models.hub",
        "def f():\n    from localspec.drafters.table import head_drafters\n",
        "models/ may not import localspec.drafters.table",
    ),
    "bench in models": (
        "localspec.models.hub",
        "from localspec.bench import quants\n",
        "models/ may not import localspec.bench.quants",
    ),
    "a family importing another": (
        "localspec.drafters.dflash.drafter",
        "from localspec.drafters.eagle.drafter import EagleDrafter\n",
        "the dflash family may not import another family (localspec.drafters.eagle.drafter)",
    ),
    "apps imported from below": (
        "localspec.session",
        "def f():\n    from localspec.apps.server import tools\n",
        "only apps/ imports apps/",
    ),
    "a private import": (
        "localspec.drafters.eagle.llama_head",
        "from localspec.backends.llama_cpp.capi import _LOG_LINES\n",
        "imports the private localspec.backends.llama_cpp.capi._LOG_LINES",
    ),
    "a private read off a module": (
        "localspec.bench.quants",
        "from localspec.backends.llama_cpp import capi\nx = capi._LOG_LINES\n",
        "reads the private localspec.backends.llama_cpp.capi._LOG_LINES",
    ),
    "a backend's private attribute": (
        "localspec.drafters.eagle.llama_head",
        "def f(target):\n    return target._ctx\n",
        "reads a backend's private target._ctx",
    ),
    "a getattr on a backend": (
        "localspec.session",
        "def f(self):\n    return getattr(self.backend, 'snapshot_bytes', 0)\n",
        "getattr on a backend",
    ),
    "a backend-name comparison": (
        "localspec.drafters.mtp.drafter",
        "def build(target):\n    if target.name == 'torch':\n        pass\n",
        "compares a backend's name",
    ),
}


@pytest.mark.parametrize("kind", PLANTED)
def test_each_rule_fails_on_a_planted_violation(kind):
    module, line, expected = PLANTED[kind]
    sources = package_sources()
    sources[module] = sources[module] + "\n" + line
    found = layout_violations(sources)
    assert any(expected in v and v.startswith(module) for v in found), found


def imported_test_modules(source: str) -> list[str]:
    """The test modules a test source imports (anywhere in it, a function body too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [n for n in names if n.split(".")[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another():
    """Shared test code lives in tests/support/; a test module imported from another only resolves when pytest
    happened to put its folder on sys.path first."""
    tests = ROOT.parent / "tests"
    offenders = {
        str(path.relative_to(tests)): found
        for path in sorted(tests.rglob("*.py"))
        if (found := imported_test_modules(path.read_text()))
    }
    assert offenders == {} and len(list(tests.rglob("test_*.py"))) > 50  # the walk saw the suite
    assert imported_test_modules("def f():\n    from test_llama_cpp import PROMPTS\n") == ["test_llama_cpp"]
