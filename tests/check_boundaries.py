#!/usr/bin/env python3
"""The house rule of docs/design.md, checked: core/ never includes Qt; ui/ and the GUI entry point never
reach a libtorch header, directly or through any project header they include (transitively)."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
include = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
torch_prefixes = ("ATen/", "torch/", "c10/", "caffe2/")


def includes(path):
    return include.findall(path.read_text(encoding="utf-8"))


def resolve(name, near):
    for base in (near.parent, root / "core", root / "ui"):
        candidate = base / name
        if candidate.is_file():
            return candidate.resolve()
    return None


def torch_reach(path, seen, chain):
    """Yields include chains from path to a libtorch header."""
    if path in seen:
        return
    seen.add(path)
    for kind, name in includes(path):
        if name.startswith(torch_prefixes):
            yield chain + [f"<{name}>"]
        elif kind == '"':
            target = resolve(name, path)
            if target:
                yield from torch_reach(target, seen, chain + [str(target.relative_to(root))])


problems = []
for path in sorted((root / "core").rglob("*")):
    if path.suffix in (".h", ".cpp"):
        for kind, name in includes(path):
            if re.match(r"Q[A-Z]|Qt", name):
                problems.append(f"{path.relative_to(root)} includes the Qt header <{name}>")
gui_sources = [p for p in sorted((root / "ui").rglob("*")) if p.suffix in (".h", ".cpp")]
gui_sources.append(root / "app" / "servelab_main.cpp")
for path in gui_sources:
    for chain in torch_reach(path.resolve(), set(), [str(path.relative_to(root))]):
        problems.append(" -> ".join(chain))
        break
if problems:
    print("core/UI boundary broken:\n  " + "\n  ".join(problems))
    sys.exit(1)
print(f"boundary ok: {len(gui_sources)} GUI files reach no libtorch header; core includes no Qt")
