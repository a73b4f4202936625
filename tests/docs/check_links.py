#!/usr/bin/env python3
"""Every relative link of the repository's Markdown resolves, anchors included.

For each tracked .md file (README.md, docs/, bench/README.md, python/README.md, ...):
- a link [text](path), [text](path#anchor) or a reference definition [label]: path names a file
  or folder that exists, relative to the linking file;
- an anchor into a Markdown file ([text](#anchor), [text](page.md#anchor)) is the slug of one of
  that file's headings, made as GitHub makes it: lowercase, punctuation dropped, each space a
  '-', and a repeated heading suffixed -1, -2, ... (an explicit <a name="..."> or id="..." counts
  too). Headings and links inside fenced code blocks and inline code are not read.
External links (http:, https:, mailto:) are not fetched.

Usage: check_links.py SOURCE_DIR. Prints each broken link as FILE:LINE: TARGET: why, and exits 1;
or prints a summary and exits 0. Python's standard library only.
"""

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)\s*=\s*\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def markdown_files(root: Path) -> list:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=root, capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return sorted(root / line for line in out.stdout.splitlines())
    skip = {"build", ".git", "node_modules"}  # not a git checkout: every .md outside builds
    return sorted(p for p in root.rglob("*.md") if not skip & set(p.relative_to(root).parts))


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * len(match.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= {fence[0]}:
                fence = None
            continue
        yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in " -_" or category[0] in "LN" or category == "Mn":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path, cache: dict) -> set:
    if path not in cache:
        found, seen, previous = set(), {}, None
        for _, line in prose_lines(path.read_text(encoding="utf-8")):
            match = ATX.match(line)
            text = match.group(2) if match else None
            if text is None and previous and previous.strip() and SETEXT.match(line):
                text = previous.strip()
            if text is not None:
                base = slug(text)
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(HTML_ANCHOR.findall(line))
            previous = None if match else line
        cache[path] = found
    return cache[path]


def links(path: Path):
    """(line number, target) of every link; a link's text may run over several lines."""
    text = path.read_text(encoding="utf-8")
    lines = [""] * (text.count("\n") + 1)
    for number, line in prose_lines(text):
        lines[number - 1] = CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), line)
        match = REFDEF.match(line)
        if match:
            yield number, match.group(1)
    prose = "\n".join(lines)
    for match in LINK.finditer(prose):
        yield prose.count("\n", 0, match.start(1)) + 1, match.group(1)


def check(root: Path, path: Path, number: int, target: str, cache: dict):
    """A problem with one link, or None."""
    if EXTERNAL.match(target):
        return None
    file_part, _, anchor = target.partition("#")
    if file_part.startswith("/"):
        return "an absolute path (links must be relative to the file)"
    dest = (path.parent / file_part).resolve() if file_part else path.resolve()
    try:
        dest.relative_to(root.resolve())
    except ValueError:
        return "outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix == ".md" and dest.is_file():
        if anchor not in anchors(dest, cache):
            return f"no heading of {dest.relative_to(root.resolve())} has the anchor #{anchor}"
    return None


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: check_links.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = Path(sys.argv[1]).resolve()
    files = markdown_files(root)
    cache, problems, count = {}, 0, 0
    for path in files:
        for number, target in links(path):
            count += 1
            why = check(root, path, number, target, cache)
            if why:
                problems += 1
                print(f"{path.relative_to(root)}:{number}: {target}: {why}")
    if problems:
        print(f"{problems} broken link(s) of {count} in {len(files)} Markdown files")
        return 1
    if not files:
        print("no Markdown files found", file=sys.stderr)
        return 1
    print(f"{count} links in {len(files)} Markdown files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
