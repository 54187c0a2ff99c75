"""PyTorch's pytorch_model.bin read without torch, tensors only.

The file is a zip (torch.save since 1.6): ARCHIVE/data.pkl, a pickle of the state dict, and
ARCHIVE/data/KEY, each storage's raw little-endian bytes. A pickle is a program: it may call
any importable function. This reader runs it on an Unpickler that resolves exactly the names
a plain state dict needs (an OrderedDict, the tensor rebuild functions, the typed storage
classes) to harmless stand-ins, and refuses any other name before calling anything; a storage
is a reference (persistent id) that is read only when a tensor's rows are asked for.
"""

from __future__ import annotations

import math
import pickle
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.export.checkpoint import LazyTensors

STORAGES = {  # torch's typed storage class -> numpy dtype (bf16 as its raw 16 bits)
    "FloatStorage": np.float32, "HalfStorage": np.float16, "BFloat16Storage": np.uint16,
    "DoubleStorage": np.float64, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}  # fmt: skip
FLOATS = ("FloatStorage", "HalfStorage", "BFloat16Storage", "DoubleStorage")


@dataclass(frozen=True)
class Storage:
    kind: str  # a STORAGES key
    key: str  # its file under ARCHIVE/data/


@dataclass(frozen=True)
class TensorRef:
    storage: Storage
    offset: int  # in elements
    shape: tuple[int, ...]


def rebuild_tensor(storage, offset, shape, stride, *_rest) -> TensorRef:
    """torch._utils._rebuild_tensor_v2's arguments; only contiguous row-major tensors."""
    if not isinstance(storage, Storage):
        raise pickle.UnpicklingError("a tensor without a storage")
    shape = tuple(int(d) for d in shape)
    want = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    if tuple(stride) != want and math.prod(shape) > 1:
        raise pickle.UnpicklingError(f"a strided (non-contiguous) tensor {shape} {stride}")
    return TensorRef(storage, int(offset), shape)


def rebuild_parameter(data, *_rest) -> Any:
    return data  # torch._utils._rebuild_parameter: nn.Parameter(data)


class TensorsOnly(pickle.Unpickler):
    ALLOWED = {
        ("collections", "OrderedDict"): OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): rebuild_parameter,
        **{("torch", kind): kind for kind in STORAGES},
    }

    def find_class(self, module: str, name: str) -> Any:
        found = self.ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"it asks for {module}.{name}")
        return found

    def persistent_load(self, pid: Any) -> Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"an unknown persistent id {str(pid)[:60]}")
        kind = pid[1]
        if kind not in STORAGES:  # find_class returned the name for a typed storage
            raise pickle.UnpicklingError(f"a storage of type {kind!r}")
        return Storage(kind, str(pid[2]))


class TorchBinTensors(LazyTensors):
    """The tensors of pytorch_model*.bin files (a state dict of plain tensors each)."""

    def __init__(self, paths: list[Path]) -> None:
        self.entries: dict[str, tuple[Path, str, TensorRef]] = {}
        for path in paths:
            prefix, state = read_state_dict(path)
            for name, ref in state.items():
                self.entries[name] = (path, prefix, ref)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.entries[name][2].shape

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        path, _, ref = self.entries[name]
        if ref.storage.kind not in FLOATS:
            raise ModelFileError(f"{path}: tensor {name} holds {ref.storage.kind}, not floats")
        raw = self.raw(name, start, stop)
        if ref.storage.kind == "BFloat16Storage":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32)

    def integers(self, name: str) -> np.ndarray:
        path, _, ref = self.entries[name]
        if ref.storage.kind not in ("LongStorage", "IntStorage"):
            raise ModelFileError(
                f"{path}: tensor {name} holds {ref.storage.kind}, not integers (int64, int32)"
            )
        return self.raw(name, 0, ref.shape[0] if ref.shape else 1).astype(np.int64)

    def raw(self, name: str, start: int, stop: int) -> np.ndarray:
        path, prefix, ref = self.entries[name]
        dtype = np.dtype(STORAGES[ref.storage.kind])
        row = math.prod(ref.shape[1:])
        count = (stop - start) * row if ref.shape else 1
        first = (ref.offset + start * row) * dtype.itemsize
        with zipfile.ZipFile(path) as z, z.open(f"{prefix}/data/{ref.storage.key}") as f:
            data = f.read()
        if first + count * dtype.itemsize > len(data):
            raise ModelFileError(
                f"{path}: tensor {name} ends past its storage; the file is corrupt (download "
                "it again)"
            )
        out = np.frombuffer(data, dtype=dtype, count=count, offset=first)
        return out.reshape((stop - start, *ref.shape[1:]) if ref.shape else ())


def read_state_dict(path: Path) -> tuple[str, dict[str, TensorRef]]:
    """(the archive's folder name, tensor name -> where its data is); refused as one line
    where the file is not a zip of a plain state dict."""
    try:
        with zipfile.ZipFile(path) as z:
            pickles = [n for n in z.namelist() if n.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise ModelFileError(
                    f"{path} holds no PyTorch state dict (no data.pkl); download it again"
                )
            blob = z.read(pickles[0])
    except zipfile.BadZipFile:
        raise ModelFileError(
            f"{path} is not a zip (a PyTorch file saved before 1.6, or corrupt); edgespec reads "
            "only zip .bin files: convert it to safetensors with torch"
        ) from None
    import io

    try:
        state = TensorsOnly(io.BytesIO(blob)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise ModelFileError(
            f"{path}: its pickle is not plain tensors ({e}); edgespec runs no code from a "
            "checkpoint: convert it to safetensors with torch where you trust it"
        ) from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, TensorRef) for k, v in state.items()
    ):
        raise ModelFileError(
            f"{path}: its pickle is not a state dict of tensors; give the head's weights"
        )
    return pickles[0][: -len("/data.pkl")], state
