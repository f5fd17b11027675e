"""Unpack go-embed-python's CPython tree for one platform into a directory.

    python3 extract_python.py SRC DEST

SRC is the module's python/internal/data/<platform> directory: a ``files.json`` manifest
({"contentHash": ..., "files": [{"name", "size", "perm", "compressed"}, ...]}) and the
files it names, a compressed one stored as ``<name>.gz``. ``perm`` is a Go ``fs.FileMode``:
its high bits say what kind of entry it is, the low nine are the Unix permissions. Every
file is checked against the size the manifest gives. DEST is written through a temporary
sibling and renamed into place, so an interrupted run leaves no half tree behind.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

GO_MODE_DIR = 1 << 31
GO_MODE_SYMLINK = 1 << 27


def extract(src: Path, dest: Path) -> int:
    manifest = json.loads((src / "files.json").read_text())
    work = dest.with_name(dest.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    count = 0
    for entry in manifest["files"]:
        name, mode = entry["name"], entry["perm"]
        target = work / name
        if mode & GO_MODE_DIR:
            target.mkdir(parents=True, exist_ok=True)
            continue
        if mode & GO_MODE_SYMLINK:
            raise SystemExit(f"{name}: symbolic links are not expected in this tree")
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.get("compressed"):
            with gzip.open(src / (name + ".gz"), "rb") as fin, open(target, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        else:
            shutil.copyfile(src / name, target)
        target.chmod((mode & 0o777) | 0o200)
        size = target.stat().st_size
        if size != entry["size"]:
            raise SystemExit(f"{name}: {size} bytes, the manifest says {entry['size']}")
        count += 1
    if dest.exists():
        shutil.rmtree(dest)
    work.rename(dest)
    return count


def main() -> None:
    src, dest = Path(sys.argv[1]), Path(sys.argv[2])
    count = extract(src, dest)
    print(f"extract_python: {count} files from {src} into {dest}")


if __name__ == "__main__":
    main()
