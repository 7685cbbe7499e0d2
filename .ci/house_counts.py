"""The house counts docs/development.md states: function signatures that take the whole `NodeConfig`, and test
modules that import from another test module. Run from the clone: `python .ci/house_counts.py`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def node_config_signatures() -> tuple[int, int]:
    """(signatures, files): functions of the package with a parameter annotated `NodeConfig`."""
    count, files = 0, set()
    for path in (ROOT / "swarmnode").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                if any(a.annotation is not None and "NodeConfig" in ast.unparse(a.annotation) for a in args):
                    count, files = count + 1, files | {path}
    return count, len(files)


def tied_test_modules() -> int:
    """Test modules (tests/**/test_*.py) that import from another test module."""
    modules = {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    pattern = re.compile(r"^\s*(?:from|import) (test_\w+)", re.M)
    return sum(
        1 for p in (ROOT / "tests").rglob("test_*.py") if any(m in modules for m in pattern.findall(p.read_text()))
    )


if __name__ == "__main__":
    signatures, files = node_config_signatures()
    print(f"NodeConfig signatures: {signatures} in {files} files")
    print(f"test modules importing from another test module: {tied_test_modules()}")
