"""Layers by package (envbuilder.image.oci.packages): a venv layer split into one layer per
installed distribution, the venv's own files last; a bump changes only its package's layer."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from envbuilder.image.oci.canonical import Meta, View, canonicalise
from envbuilder.image.oci.layers import ReadLayer, read_layer, write_layer
from envbuilder.image.oci.packages import BUCKETS, Part, record_paths, split_by_package

SITE = "opt/venv/lib/python3.11/site-packages"
EPOCH = 315532800


def _record(files: dict[str, bytes], info: str) -> bytes:
    rows = [f"{name},sha256=x,{len(data)}" for name, data in files.items()]
    return ("\n".join([*rows, f"{info}/RECORD,,"]) + "\n").encode()


def dist(name: str, version: str, files: dict[str, bytes]) -> dict[str, bytes]:
    """The files of one installed distribution (paths relative to site-packages, `../` for
    scripts), its dist-info and RECORD included."""
    info = f"{name}-{version}.dist-info"
    out = {**files, f"{info}/METADATA": f"Name: {name}\nVersion: {version}\n".encode()}
    out[f"{info}/RECORD"] = _record(out, info)
    return out


def venv_layer(
    tmp_path: Path,
    dists: list[dict[str, bytes]],
    tag: str = "v",
    extra: tuple[str, ...] = (),
    lower: View | None = None,
) -> ReadLayer:
    """A layer as `COPY /opt/venv` makes it: folders, the distributions, the venv's own files
    (pyvenv.cfg, the interpreter link, activate), read and canonicalised as the writer does."""
    files: dict[str, bytes] = {
        "opt/venv/pyvenv.cfg": b"home = /usr/bin\n",
        "opt/venv/bin/activate": b"# activate\n",
    }
    for d in dists:
        for rel, data in d.items():
            files[f"{SITE}/{rel}".replace(f"{SITE}/../../../", "opt/venv/")] = data
    folders = sorted({p.rpartition("/")[0] for p in files} | {"opt/venv/lib/python3.11/x"})
    path = tmp_path / f"{tag}.tar"
    with tarfile.open(path, "w") as tar:
        for folder in _with_parents(folders):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            tar.addfile(info, io.BytesIO(files[name]))
        link = tarfile.TarInfo("opt/venv/bin/python")
        link.type, link.linkname = tarfile.SYMTYPE, "/usr/bin/python3"
        tar.addfile(link)
        for name in extra:
            info = tarfile.TarInfo(name)
            tar.addfile(info, io.BytesIO(b""))
    fh = path.open("r+b")
    layer = read_layer(fh, EPOCH)
    canonicalise(layer, lower or {})
    return layer


def _with_parents(folders: list[str]) -> list[str]:
    out: set[str] = set()
    for folder in folders:
        while folder:
            out.add(folder)
            folder = folder.rpartition("/")[0]
    return sorted(out)


def names(part: Part) -> set[str]:
    return set(part.layer.entries)


TORCH = dist(
    "torch",
    "2.13.0",
    {
        "torch/__init__.py": b"x" * 5000,
        "torch/lib/a.so": b"y" * 9000,
        # A vendored copy's dist-info is its host's file, not a distribution of the venv.
        "torch/_vendor/zipp-3.23.0.dist-info/RECORD": b"zipp/__init__.py,,\n",
        "torch/_vendor/zipp/__init__.py": b"z",
    },
)
FILELOCK = dist("filelock", "4.3.1", {"filelock/__init__.py": b"lock = 1\n"})
NUMPY = dist(
    "numpy", "2.3.0", {"numpy/__init__.py": b"n" * 3000, "../../../bin/f2py": b"#!python\n"}
)


def test_one_layer_per_distribution_largest_first_and_the_venvs_own_files_last(
    tmp_path: Path,
) -> None:
    parts = split_by_package(venv_layer(tmp_path, [FILELOCK, TORCH, NUMPY]), budget=100)
    assert [p.label for p in parts] == [
        "torch 2.13.0",
        "numpy 2.3.0",
        "filelock 4.3.1",
        "the venv's own files",
    ]
    torch, numpy, filelock, own = parts
    assert f"{SITE}/torch/lib/a.so" in names(torch)
    assert f"{SITE}/torch-2.13.0.dist-info/RECORD" in names(torch)
    assert f"{SITE}/torch/_vendor/zipp/__init__.py" in names(torch)
    assert "opt/venv/bin/f2py" in names(numpy)  # a script RECORD names with ../../../bin
    assert f"{SITE}/torch/__init__.py" not in names(filelock)
    assert {"opt/venv/pyvenv.cfg", "opt/venv/bin/activate", "opt/venv/bin/python"} <= names(own)
    # A folder is in every layer with an entry below it (the classic applier needs it), and
    # a folder of one distribution in its layer only.
    for part in parts:
        for name in names(part):
            parent = name.rpartition("/")[0]
            assert not parent or parent in names(part), (part.label, name)
    assert f"{SITE}/torch/lib" in names(torch) and f"{SITE}/torch/lib" not in names(own)
    assert "opt/venv/lib/python3.11/x" in names(own)  # an empty folder: the venv's own
    # Together they hold exactly the layer's entries.
    whole = venv_layer(tmp_path, [FILELOCK, TORCH, NUMPY], "again")
    assert set().union(*map(names, parts)) == set(whole.entries)
    assert sum(p.size for p in parts) > 17000


def test_a_bump_changes_the_layer_of_the_bumped_package_only(tmp_path: Path) -> None:
    bumped = dist("filelock", "4.3.2", {"filelock/__init__.py": b"lock = 2\n"})
    before = _written(
        tmp_path / "a", split_by_package(venv_layer(tmp_path, [FILELOCK, TORCH]), 100)
    )
    after = _written(
        tmp_path / "b", split_by_package(venv_layer(tmp_path, [bumped, TORCH], "b"), 100)
    )
    assert before["torch 2.13.0"] == after["torch 2.13.0"]
    assert before["the venv's own files"] == after["the venv's own files"]
    assert before["filelock 4.3.1"] != after["filelock 4.3.2"]


def _written(folder: Path, parts: list[Part]) -> dict[str, str]:
    folder.mkdir()
    return {
        p.label: write_layer(p.layer, folder / f"{i}.tar", EPOCH).diff_id
        for i, p in enumerate(parts)
    }


def test_a_layer_without_distributions_or_with_a_whiteout_stays_one(tmp_path: Path) -> None:
    [one] = split_by_package(venv_layer(tmp_path, []), budget=100)
    assert one.label == ""
    below: View = {"opt/venv/old": Meta(tarfile.REGTYPE, 0o644, 0, 0, "")}
    layer = venv_layer(tmp_path, [TORCH], "wh", extra=("opt/venv/.wh.old",), lower=below)
    assert [p.label for p in split_by_package(layer, budget=100)] == [""]
    assert [p.label for p in split_by_package(venv_layer(tmp_path, [TORCH], "b"), 1)] == [""]


def test_beyond_the_budget_small_distributions_share_buckets_by_name(tmp_path: Path) -> None:
    many = [dist(f"pkg{i:02}", "1.0", {f"pkg{i:02}/m.py": b"z" * (100 + i)}) for i in range(40)]
    budget = BUCKETS + 4  # 3 alone, BUCKETS buckets, the venv's own files
    parts = split_by_package(venv_layer(tmp_path, many), budget)
    assert len(parts) <= budget
    assert [p.label for p in parts[:3]] == ["pkg39 1.0", "pkg38 1.0", "pkg37 1.0"]
    assert all(p.label.startswith("group ") for p in parts[3:-1])
    # A package stays in its bucket when another joins the lock.
    more = split_by_package(
        venv_layer(tmp_path, [*many, dist("newcomer", "1.0", {"newcomer.py": b"n"})], "m"),
        budget + 1,
    )
    assert _bucket_of(parts, "pkg05") == _bucket_of(more, "pkg05")


def _bucket_of(parts: list[Part], package: str) -> str:
    [label] = [
        p.label for p in parts if f" {package}," in f" {p.label}," or p.label.endswith(package)
    ]
    return label.partition(":")[0]


def test_record_paths_resolve_against_site_packages_and_stay_in_the_root() -> None:
    info = f"{SITE}/x-1.dist-info"
    data = (
        b'x/a.py,,\n../../../bin/x,,\n"x/with,comma.py",,\n/etc/abs,,\n../../../../../../../up,,\n'
    )
    assert record_paths(data, info) == [
        f"{SITE}/x/a.py",
        "opt/venv/bin/x",
        f"{SITE}/x/with,comma.py",
        "etc/abs",
    ]
