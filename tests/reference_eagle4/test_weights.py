"""The converted-target cache checks itself: sizes and headers on every load, a rebuild when a file is missing,
truncated or corrupt, and one line naming the path for a bad GGUF file or a cache folder that cannot be written.

The GGUF conversion (transformers' reader, slow) is replaced by a copy of the tiny target's folder; the files
around it (the GGUF's bytes and hash, the cache folder, the checks) are real."""

import json
import shutil
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from reference_eagle4 import weights
from reference_eagle4.weights import (CACHE_FILES, WeightsError, cache_problem, resolve_target, safetensors_problem,
                                      weights_sha256)


@pytest.fixture
def conv(tmp_path, tiny_target, monkeypatch):
    """`conv.gguf`: a .gguf file whose conversion copies the tiny target, with SPECBENCH_CACHE in tmp_path;
    `conv.calls`: the conversions run."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + bytes(range(256)) * 4)
    calls = []

    def convert(src: Path, dest: Path) -> None:
        calls.append(src)
        for f in tiny_target.iterdir():
            shutil.copy(f, dest / f.name)

    monkeypatch.setattr(weights, "_convert", convert)
    return SimpleNamespace(gguf=path, calls=calls)


def test_conversion_records_sizes_and_hashes_and_a_sound_cache_is_reused(conv):
    folder = resolve_target(str(conv.gguf))
    recorded = json.loads((folder / CACHE_FILES).read_text())
    st = folder / "model.safetensors"
    assert recorded["model.safetensors"]["size"] == st.stat().st_size
    assert recorded["model.safetensors"]["sha256"] == weights.sha256_file(st)
    assert "SOURCE_SHA256" in recorded and not list(folder.parent.glob("*.partial"))
    assert resolve_target(str(conv.gguf)) == folder and len(conv.calls) == 1
    assert len(weights_sha256(folder)) == 64


@pytest.mark.parametrize("damage, said", [
    (lambda f: f.write_bytes(f.read_bytes()[:-100]), "model.safetensors has"),         # truncated
    (lambda f: f.unlink(), "model.safetensors is missing"),
    (lambda f: f.write_bytes(struct.pack("<Q", 20) + b"{not json at all!!!}" + f.read_bytes()[28:]),
     "model.safetensors has a header that does not parse"),
    (lambda f: (f.parent / CACHE_FILES).unlink() or f.write_bytes(f.read_bytes()[:-100]),
     "model.safetensors is truncated"),                                                # a cache without sizes
])
def test_a_damaged_cache_is_rebuilt_saying_so_in_one_line(conv, capsys, damage, said):
    folder = resolve_target(str(conv.gguf))
    good = (folder / "model.safetensors").read_bytes()
    damage(folder / "model.safetensors")
    assert cache_problem(folder) is not None
    assert resolve_target(str(conv.gguf)) == folder and len(conv.calls) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"{folder}: {said}")
    assert err.endswith(f"rebuilding it from {conv.gguf}")
    assert (folder / "model.safetensors").read_bytes() == good and cache_problem(folder) is None


def test_a_file_corrupt_in_place_fails_its_hash_naming_it(conv):
    folder = resolve_target(str(conv.gguf))
    st = folder / "model.safetensors"
    data = bytearray(st.read_bytes())
    data[-1] ^= 0xFF                                   # same size, same header: only the hash tells
    st.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match=f"^{st}: its sha256 differs .* delete {folder}"):
        weights_sha256(folder)


def test_an_unwritable_cache_is_one_line_before_any_conversion(conv, tmp_path, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("SPECBENCH_CACHE", str(blocker / "cache"))
    with pytest.raises(WeightsError, match=f"^cache folder {blocker / 'cache' / 'targets'} is not writable .*"
                                           "SPECBENCH_CACHE"):
        resolve_target(str(conv.gguf))
    assert len(conv.calls) == 0


def test_a_read_only_cache_still_serves_a_sound_folder(conv, monkeypatch):
    folder = resolve_target(str(conv.gguf))
    monkeypatch.setattr(weights.tempfile, "mkdtemp", lambda **kw: (_ for _ in ()).throw(PermissionError(13, "ro")))
    assert resolve_target(str(conv.gguf)) == folder


def test_a_bad_gguf_file_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("these are notes, not weights")
    with pytest.raises(WeightsError, match=f"^{not_gguf}: not a GGUF file"):
        resolve_target(str(not_gguf))
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 21)      # the real reader on a header cut short
    with pytest.raises(WeightsError, match=f"^{cut}: cannot read it as a GGUF model"):
        resolve_target(str(cut))
    assert not list((tmp_path / "cache" / "targets").iterdir())  # no half-converted folder left behind


def test_a_user_folder_with_a_truncated_file_names_it(tiny_target, tmp_path):
    folder = tmp_path / "target"
    shutil.copytree(tiny_target, folder)
    st = folder / "model.safetensors"
    assert safetensors_problem(st) is None
    st.write_bytes(st.read_bytes()[:5])
    with pytest.raises(WeightsError, match=f"^{st} is truncated"):
        resolve_target(str(folder))
