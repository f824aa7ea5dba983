"""How much of MegEngine's public Python API xmge provides: for every module of a MegEngine source
tree that declares ``__all__``, the names it lists that ``compiler.<same path>`` has.

    python bench/mge_api_coverage.py PATH/TO/imperative/python/megengine [--missing]

The MegEngine source is read as text (parsed with ``ast``, never imported or run); a module path
xmge does not have counts all its names as missing. Prints a line per module and the total.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# MegEngine modules outside the scope of an inference compiler's Python API (docs/MEGENGINE_API.md)
OUT_OF_SCOPE = ("data", "dtr", "xla", "tools", "experimental", "distributions", "utils.profiler", "conftest")


def declared_all(path: str) -> list[str] | None:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AugAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return [v for v in value if isinstance(v, str)]
    return None


def modules(root: str) -> list[tuple[str, list[str]]]:
    out = []
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".py") or "test" in name:
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root)[:-3].replace(os.sep, ".")
            rel = (
                rel[: -len(".__init__")] if rel.endswith(".__init__") else ("" if rel == "__init__" else rel)
            )
            if any(rel == s or rel.startswith(s + ".") for s in OUT_OF_SCOPE) or "._" in "." + rel:
                continue
            names = declared_all(os.path.join(dirpath, name))
            if names:
                out.append((rel, names))
    return sorted(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("megengine", help="the megengine package folder of a MegEngine source tree")
    ap.add_argument("--missing", action="store_true", help="list the missing names")
    args = ap.parse_args()
    total = have = 0
    for rel, names in modules(args.megengine):
        target = "compiler" + ("." + rel if rel else "")
        try:
            mod = importlib.import_module(target)
        except ImportError:
            mod = None
        present = [n for n in names if mod is not None and hasattr(mod, n)]
        total += len(names)
        have += len(present)
        missing = sorted(set(names) - set(present))
        line = f"{target:45} {len(present):4d}/{len(names):<4d}"
        if args.missing and missing:
            line += "  missing: " + ", ".join(missing)
        print(line)
    print(
        f"\nMegEngine public names (from __all__) provided by xmge: {have} of {total} "
        f"({100 * have / total:.0f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
