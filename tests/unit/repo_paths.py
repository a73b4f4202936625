#!/usr/bin/env python3
"""Every path the repository names stays inside it, and exists: a fresh clone holds nothing else.

- Markdown: every relative link ([text](path) or [text](path#anchor)) names a file or folder of
  the repository, and never one above its root.
- C, OpenCL C and headers: every #include "..." resolves to a file of the repository (next to
  the including file, or below one of the build's include folders), or to the one source the
  build generates (attn_params.cl).
- No tracked file points above the root at the sibling folder named "shared" (a path that
  climbs out of the clone, which a user's clone does not have).

Usage: repo_paths.py SOURCE_DIR. Prints each problem and exits 1, or prints a summary and exits 0.
"""

import re
import subprocess
import sys
from pathlib import Path

INCLUDE_DIRS = ["include", "runtime", ".", "cli", "bench", "hostio", "tests"]  # as CMakeLists.txt sets them
GENERATED = {"attn_params.cl", "kernels_embedded.c"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SIBLING = re.compile(r"\.\./shared\b")


def tracked(root: Path) -> list:
    out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return [root / line for line in out.stdout.splitlines()]
    skip = {"build", ".git"}  # not a git checkout (a source archive): every file but builds
    return [p for p in root.rglob("*") if p.is_file() and not skip & set(p.relative_to(root).parts)]


def inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def check_links(root: Path, md: Path, text: str, problems: list) -> int:
    checked = 0
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, mail or an anchor in the same page
        path = (md.parent / target.split("#")[0]).resolve()
        checked += 1
        if not inside(root, path):
            problems.append(f"{md.relative_to(root)}: link {target} leaves the repository")
        elif not path.exists():
            problems.append(f"{md.relative_to(root)}: link {target} names nothing")
    return checked


def check_includes(root: Path, src: Path, text: str, problems: list) -> int:
    checked = 0
    for name in INCLUDE.findall(text):
        checked += 1
        if Path(name).name in GENERATED:
            continue
        places = [src.parent / name] + [root / d / name for d in INCLUDE_DIRS]
        found = [p for p in places if p.is_file() and inside(root, p)]
        if not found:
            problems.append(f"{src.relative_to(root)}: #include \"{name}\" is no file of the repository")
    return checked


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems, links, includes = [], 0, 0
    for path in tracked(root):
        if not path.is_file() or path.suffix in {".png", ".npy", ".whl", ".gz"}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if path.suffix == ".md":
            links += check_links(root, path, text, problems)
        if path.suffix in {".c", ".h", ".cl"}:
            includes += check_includes(root, path, text, problems)
        if path.name != "repo_paths.py" and SIBLING.search(text):
            problems.append(f"{path.relative_to(root)}: names a path above the repository")
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(f"repo_paths: {links} relative links and {includes} includes, all inside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
