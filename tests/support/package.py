"""The package's source, module by module: what the layout and import-graph tests walk."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "localspec"


def module_name(path: Path) -> str:
    """``localspec/drafters/eagle/drafter.py`` -> ``localspec.drafters.eagle.drafter`` (a package: its folder)."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_sources() -> dict[str, str]:
    """Every module of the package: its name -> its source."""
    return {module_name(p): p.read_text(encoding="utf-8") for p in ROOT.rglob("*.py")}
