"""The client configurations of docs/serve.md (the blocks after `<!-- config: NAME -->`) checked the way each
client checks them: Continue's config.yaml against the zod schema of its `@continuedev/config-yaml` package,
OpenCode's opencode.json by OpenCode itself (`opencode debug config`), Zed's settings and `llm`'s model entry
for the keys their source reads. The npm packages go into a folder of their own (--npm, installed if missing).

    .venv/bin/python benchmarks/clients/check_configs.py [--npm ~/.cache/localspec-clients/npm] [--out OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("@continuedev/config-yaml", "opencode-ai")
CONTINUE_CHECK = """
const {configYamlSchema} = require("@continuedev/config-yaml");
const YAML = require("yaml");
const parsed = configYamlSchema.safeParse(YAML.parse(require("fs").readFileSync(process.argv[2], "utf8")));
console.log(JSON.stringify(parsed.success ? {ok: true} : {ok: false, issues: parsed.error.issues}));
"""


def blocks(doc: Path) -> dict[str, str]:
    text = doc.read_text()
    found = re.findall(r"<!-- config: (\w+) -->\n```\w*\n(.*?)```", text, flags=re.S)
    return dict(found)


def npm_folder(folder: Path) -> Path:
    if not all((folder / "node_modules" / p / "package.json").is_file() for p in PACKAGES):
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "init", "-y"], cwd=folder, check=True, capture_output=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", *PACKAGES], cwd=folder, check=True)
    return folder


def version(folder: Path, package: str) -> str:
    return json.loads((folder / "node_modules" / package / "package.json").read_text())["version"]


def check_continue(text: str, npm: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.yaml").write_text(text)
        (Path(tmp) / "check.js").write_text(CONTINUE_CHECK)
        env = {**os.environ, "NODE_PATH": str(npm / "node_modules")}
        done = subprocess.run(
            ["node", str(Path(tmp) / "check.js"), str(Path(tmp) / "config.yaml")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    result = json.loads(done.stdout) if done.returncode == 0 else {"ok": False, "error": done.stderr[-1500:]}
    return {
        "checked_by": f"@continuedev/config-yaml {version(npm, '@continuedev/config-yaml')} configYamlSchema",
        **result,
    }


def check_opencode(text: str, npm: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        project, home = Path(tmp) / "project", Path(tmp) / "home"
        project.mkdir()
        home.mkdir()
        (project / "opencode.json").write_text(text)
        env = {
            **os.environ,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
        }
        done = subprocess.run(
            [str(npm / "node_modules" / ".bin" / "opencode"), "debug", "config"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    ok = done.returncode == 0 and "localspec" in done.stdout
    return {
        "checked_by": f"opencode-ai {version(npm, 'opencode-ai')} `opencode debug config`",
        "ok": ok,
        "output_tail": (done.stdout + done.stderr)[-1500:],
    }


def check_zed(text: str) -> dict:
    """The keys crates/language_models/src/provider/open_ai_compatible.rs reads (api_url, available_models with
    name, max_tokens and optional display_name, max_output_tokens, capabilities)."""
    providers = json.loads(text)["language_models"]["openai_compatible"]
    known = {"name", "display_name", "max_tokens", "max_output_tokens", "max_completion_tokens", "capabilities"}
    problems = [
        f"{pid}: {why}"
        for pid, p in providers.items()
        for why in (["no api_url"] if "api_url" not in p else [])
        + [f"model keys {sorted(set(m) - known)}" for m in p.get("available_models", []) if set(m) - known]
        + [
            "model without name/max_tokens"
            for m in p.get("available_models", [])
            if not {"name", "max_tokens"} <= set(m)
        ]
    ]
    return {"checked_by": "Zed's source (open_ai_compatible.rs, open_ai.rs)", "ok": not problems, "problems": problems}


def check_llm(text: str) -> dict:
    """llm's default OpenAI plugin needs model_id and model_name in each entry (register_models)."""
    entries = yaml.safe_load(text)
    ok = isinstance(entries, list) and all({"model_id", "model_name", "api_base"} <= set(e) for e in entries)
    return {"checked_by": "llm's source (default_plugins/openai_models.py) and the harness run", "ok": ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npm", default=str(Path.home() / ".cache" / "localspec-clients" / "npm"))
    ap.add_argument("--out")
    args = ap.parse_args()
    found = blocks(ROOT / "docs" / "serve.md")
    npm = npm_folder(Path(args.npm))
    report = {
        "continue": check_continue(found["continue"], npm),
        "opencode": check_opencode(found["opencode"], npm),
        "zed": check_zed(found["zed"]),
        "llm": check_llm(found["llm"]),
    }
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0 if all(r["ok"] for r in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
