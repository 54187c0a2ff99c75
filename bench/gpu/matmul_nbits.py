"""What ONNX Runtime's MatMulNBits costs as a pass's rows grow, on a target's own matmul shapes.

On an H200 the INT4 ONNX target's 2-token pass cost 5.2 one-token passes (11.0 against 2.0 ms)
while its fp16 draft's cost about one: the verify curve that speculation lives on. This times
the target's matmuls alone, as one graph: every layer's q/k/v, o, gate, up and down (each layer
its own weights, so nothing stays in the GPU's L2 between layers) and the output layer, at
M = 1..17 rows, in each of these variants, each in a session of its own:

    dense          float MatMul (cuBLAS on CUDA): what a flat curve looks like
    int4-b128      MatMulNBits, 4 bits, blocks of 128 (the export's default), symmetric
    int4-b32       blocks of 32
    int4-b*-fpa    the same with the session entry ep.cuda.fpa_intb_gemm=1 (ONNX Runtime's
                   CUTLASS fpA_intB kernels, as OnnxRuntime(fpa_intb_gemm=True) asks for
                   them; onnxruntime-gpu 1.31.1's library holds the condition
                   "block_size_ == 32 && !has_zero_points_" for them)
    int8-b128      MatMulNBits, 8 bits (`edgespec export --target-quant int8`), blocks of
    int8-b32       128 and of 32: half an fp16 target's memory, if its curve is flat where
                   4 bits' is not (1.31.1 names a one-row kernel for 4 bits only)
    int8-b32-fpa   8 bits by fpA_intB (its condition takes 8 bits in blocks of 32 as well)

On CUDA each M is replayed as a CUDA graph of its own, as edgespec's runtime runs verify
passes, and the fpA_intB kernel ONNX Runtime chose for each shape is read from its
ORT_FPA_INTB_DEBUG lines.

    python bench/gpu/matmul_nbits.py --shape qwen2.5-1.5b --json OUT.json   # on the GPU
    python bench/gpu/matmul_nbits.py --smoke --json OUT.json               # CPU, tiny shape
    python bench/gpu/matmul_nbits.py --report OUT.json                     # its table again
    python bench/gpu/matmul_nbits.py --fpa-pays OUT.json   # the block size whose fpA pays
    python bench/gpu/matmul_nbits.py --int8-pays OUT.json  # "int8" if 8 bits flatten the curve
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_models import SHAPES, Shape  # noqa: E402

CUDA_ROWS = (1, 2, 3, 4, 5, 8, 9, 16, 17)  # verify widths: k = 0..16 drafts and the bonus row
SMOKE_ROWS = (1, 2, 5)
SMOKE_SHAPE = Shape(256, 2, 4, 2, 512, tied=False, vocab=1024)
WEIGHT_POOL = 1 << 24  # bytes of random weights, repeated
# a variant pays where its t(2)/t(1) is at most this share of what it is weighed against:
# --fpa-pays, fpA_intB against the same blocks without; --int8-pays, INT8 against INT4 (blocks
# of 128, the export's default)
PAYS = 0.8
DEBUG_LINE = re.compile(r"\[fpA_intB_debug\] M=(\d+) N=(\d+) K=(\d+) .*?kernel=(\S+(?: gemm\))?)")


@dataclass(frozen=True)
class Variant:
    name: str
    block: int | None  # None: a dense float MatMul
    fpa: bool = False
    bits: int = 4  # MatMulNBits' weight bits


CUDA_VARIANTS = (
    Variant("dense", None),
    Variant("int4-b128", 128),
    Variant("int4-b32", 32),
    Variant("int4-b128-fpa", 128, fpa=True),
    Variant("int4-b32-fpa", 32, fpa=True),
    Variant("int8-b128", 128, bits=8),  # last: the 5-minute cap cuts these first
    Variant("int8-b32", 32, bits=8),
    Variant("int8-b32-fpa", 32, fpa=True, bits=8),  # fpA_intB takes 8 bits in blocks of 32 too
)
CPU_VARIANTS = (*CUDA_VARIANTS[:3], CUDA_VARIANTS[5])


# --- the graph ----------------------------------------------------------------------------------


class MatmulGraph:
    """The target's matmuls as one ONNX graph: x [M, hidden] -> logits [M, vocab], each layer
    q/k/v -> (q) o -> + x -> gate * up -> down -> + x, then the output layer."""

    def __init__(self, shape: Shape, block: int | None, dtype: type, data: Path, bits: int = 4):
        self.shape, self.block, self.dtype, self.bits = shape, block, np.dtype(dtype), bits
        self.data = data  # the weights' external file, written as the graph is built
        # weights are a pool of random bytes laid end to end: a matmul costs what its shapes
        # cost, and writing gigabytes of fresh random numbers would cost the lent GPU minutes
        self.pool = np.random.default_rng(0).integers(0, 256, WEIGHT_POOL, np.uint8).tobytes()
        self.nodes: list = []
        self.initializers: list = []

    def build(self):
        from onnx import helper

        s = self.shape
        head_dim = s.hidden // s.heads
        x = "x"
        for layer in range(s.layers):
            p = f"l{layer}."
            qkv = self.matmul(x, s.hidden, s.hidden + 2 * s.kv_heads * head_dim, p + "qkv")
            q = self.op("Slice", qkv, self.const(p + "s0", [0]), self.const(p + "s1", [s.hidden]),
                        self.const(p + "ax", [1]))  # fmt: skip
            h = self.op("Add", x, self.matmul(q, s.hidden, s.hidden, p + "o"))
            gate = self.matmul(h, s.hidden, s.intermediate, p + "gate")
            up = self.matmul(h, s.hidden, s.intermediate, p + "up")
            down = self.matmul(self.op("Mul", gate, up), s.intermediate, s.hidden, p + "down")
            x = self.op("Add", h, down)
        logits = self.matmul(x, s.hidden, s.vocab, "lm_head")
        elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        graph = helper.make_graph(
            self.nodes, "matmuls",
            [helper.make_tensor_value_info("x", elem, ["M", s.hidden])],
            [helper.make_tensor_value_info(logits, elem, ["M", s.vocab])],
            self.initializers,
        )  # fmt: skip
        opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
        return helper.make_model(graph, opset_imports=opsets, ir_version=10)

    def op(self, op_type: str, *inputs: str, domain: str = "", **attrs) -> str:
        from onnx import helper

        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], domain=domain, **attrs))
        return out

    def const(self, name: str, value) -> str:
        from onnx import numpy_helper

        array = value if isinstance(value, np.ndarray) else np.array(value, np.int64)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def matmul(self, x: str, k: int, n: int, name: str) -> str:
        if self.block is None:
            return self.op("MatMul", x, self.weight(name, (k, n), self.dtype))
        blocks = -(-k // self.block)
        blob = (n, blocks, self.block * self.bits // 8)
        packed = self.weight(name + f".q{self.bits}", blob, np.dtype(np.uint8))
        scales = np.full((n, blocks), 0.01, self.dtype)
        return self.op(
            "MatMulNBits", x, packed, self.const(name + ".scales", scales), domain="com.microsoft",
            K=k, N=n, bits=self.bits, block_size=self.block, accuracy_level=4,
        )  # fmt: skip

    def weight(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> str:
        """An initializer stored in the external file, its bytes the pool's, page-aligned.
        (Random bytes read as float16 include NaNs and infinities; the cost is the same.)"""
        from onnx import TensorProto, helper

        length = int(np.prod(shape)) * dtype.itemsize
        with open(self.data, "ab") as f:
            f.write(b"\0" * (-f.tell() % 4096))
            offset = f.tell()
            for start in range(0, length, len(self.pool)):
                f.write(self.pool[: min(len(self.pool), length - start)])
        tensor = TensorProto(
            name=name, dims=shape, data_type=helper.np_dtype_to_tensor_dtype(dtype)
        )
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.data.name), ("offset", offset), ("length", length)):
            tensor.external_data.add(key=key, value=str(value))
        self.initializers.append(tensor)
        return name


def write_model(shape: Shape, variant: Variant, dtype: type, folder: Path) -> Path:
    import onnx

    name = f"int{variant.bits}-b{variant.block}" if variant.block else "dense"
    path = folder / f"matmuls-{name}.onnx"
    if not path.exists():  # the fpA variants share their blocks' file
        graph = MatmulGraph(shape, variant.block, dtype, path.with_suffix(".data"), variant.bits)
        onnx.save_model(graph.build(), path)
    return path


# --- timing -------------------------------------------------------------------------------------


def open_session(ort, path: Path, variant: Variant, rows: tuple[int, ...], graphs: bool | None):
    """graphs: CUDA graphs on or off on the CUDA EP; None: the CPU EP."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if graphs is not None:
        from edgespec.runtimes.onnxrt import fpa_intb_entries, require_cuda_provider

        for key, value in (fpa_intb_entries(max(rows)) if variant.fpa else {}).items():
            options.add_session_config_entry(key, value)
        providers = [("CUDAExecutionProvider", {"enable_cuda_graph": "1" if graphs else "0"})]
    else:
        providers = ["CPUExecutionProvider"]
    session = ort.InferenceSession(str(path), options, providers=providers)
    if graphs is not None:
        require_cuda_provider(session, path)
    return session


class Passes:
    """One bound pass per row count, at fixed device addresses, each its own CUDA graph."""

    def __init__(self, ort, session, shape: Shape, dtype: type, rows: tuple[int, ...],
                 graphs: bool | None):  # fmt: skip
        self.ort, self.session = ort, session
        self.bound = {}
        for m in rows:
            x = (np.random.default_rng(m).standard_normal((m, shape.hidden)) * 0.1).astype(dtype)
            binding = session.io_binding()
            device = "cpu" if graphs is None else "cuda"
            binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, device, 0))
            out = ort.OrtValue.ortvalue_from_shape_and_type((m, shape.vocab), dtype, device, 0)
            binding.bind_ortvalue_output(session.get_outputs()[0].name, out)
            run_options = ort.RunOptions()
            if graphs:
                run_options.add_run_config_entry("gpu_graph_id", str(m))
            self.bound[m] = (binding, run_options, out)

    def run(self, m: int) -> float:
        binding, run_options, _ = self.bound[m]
        start = time.perf_counter()
        self.session.run_with_iobinding(binding, run_options)  # waits for the device
        return (time.perf_counter() - start) * 1e3


def time_rows(passes: Passes, rows: tuple[int, ...], rounds: int, warmup: int) -> dict:
    """Per row count: the median and the fastest pass (ms), in rounds across the row counts so
    the machine's drift falls on all alike; the first `warmup` rounds (captures) unrecorded."""
    times: dict[int, list[float]] = {m: [] for m in rows}
    for r in range(warmup + rounds):
        for m in rows:
            ms = passes.run(m)
            if r >= warmup:
                times[m].append(ms)
    return {str(m): {"ms": statistics.median(t), "min_ms": min(t)} for m, t in times.items()}


@contextlib.contextmanager
def native_stdout_to(path: Path):
    """File descriptor 1 (what ONNX Runtime's C++ prints with std::cout) into `path`."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def fpa_kernels(log: str) -> list[dict]:
    """The fpA_intB kernel ONNX Runtime chose per (M, N, K), once each, from its debug lines."""
    seen: dict[tuple, dict] = {}
    for m, n, k, kernel in DEBUG_LINE.findall(log):
        seen.setdefault((int(m), int(n), int(k)), {"M": int(m), "N": int(n), "K": int(k),
                                                   "kernel": kernel})  # fmt: skip
    return sorted(seen.values(), key=lambda e: (e["N"], e["K"], e["M"]))


def measure_variant(ort, variant: Variant, args, folder: Path) -> dict:
    on_cuda = args.device == "cuda"
    dtype = np.float16 if on_cuda else np.float32
    rows = SMOKE_ROWS if args.smoke else CUDA_ROWS
    entry: dict = {"block": variant.block, "bits": variant.bits, "fpa": variant.fpa}
    # on CUDA graphs first, as the runtime runs verify passes; where they fail, without
    for graphs in (True, False) if on_cuda else (None,):
        entry["cuda_graphs"] = graphs
        try:
            path = write_model(args.shape_obj, variant, dtype, folder)
            log = folder / f"{variant.name}.stdout"
            with native_stdout_to(log):
                session = open_session(ort, path, variant, rows, graphs)
                passes = Passes(ort, session, args.shape_obj, dtype, rows, graphs)
                entry["rows"] = time_rows(passes, rows, args.rounds, warmup=3)
            entry["fpa_kernels"] = fpa_kernels(log.read_text(errors="replace"))
            return entry
        except Exception as e:  # noqa: BLE001 - a variant this build refuses is a finding
            key = "graph_error" if graphs else "error"
            entry[key] = f"{type(e).__name__}: {str(e)[:400]}"
    return entry


def measure(args) -> dict:
    if args.device == "cuda":
        os.environ["ORT_FPA_INTB_DEBUG"] = "1"  # read once, at the first fpA_intB pass
    import onnxruntime as ort

    if args.device == "cuda":  # edgespec as installed: the checkout is not a package layout
        from edgespec.runtimes.onnxrt import preload_cuda_libraries

        preload_cuda_libraries(ort)
    variants = CPU_VARIANTS if args.device == "cpu" else CUDA_VARIANTS
    report = {
        "onnxruntime": ort.__version__,
        "device": args.device,
        "gpu": gpu_name() if args.device == "cuda" else None,
        "shape": args.shape,
        "dtype": "float16" if args.device == "cuda" else "float32",
        "rounds": args.rounds,
        "beside_build": args.beside_build,
        "variants": {},
    }
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        for variant in variants:
            print(f"{variant.name} ...", file=sys.stderr, flush=True)
            report["variants"][variant.name] = measure_variant(ort, variant, args, Path(tmp))
            if args.json:  # after each variant: a run stopped by a timeout keeps what it had
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(report, indent=1))
    return report


def gpu_name() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


# --- reading the report -------------------------------------------------------------------------


def ratio(entry: dict, m: int) -> float | None:
    rows = entry.get("rows") or {}
    if "1" not in rows or str(m) not in rows:
        return None
    return rows[str(m)]["ms"] / rows["1"]["ms"]


def pays(report: dict, variant: str, against: str) -> bool:
    """Whether `variant` makes a 2-row pass at most PAYS of what `against` costs, each
    relative to its own one-row pass (False where either was not measured)."""
    variants = report["variants"]
    fast, slow = ratio(variants.get(variant, {}), 2), ratio(variants.get(against, {}), 2)
    return fast is not None and slow is not None and fast <= PAYS * slow


def fpa_pays(report: dict) -> int | None:
    """The block size whose fpA_intB variant makes a 2-row pass at most PAYS of what the
    same blocks cost without it (relative to one row), the smaller block first; None if none."""
    for block in (32, 128):
        if pays(report, f"int4-b{block}-fpa", f"int4-b{block}"):
            return block
    return None


def int8_pays(report: dict) -> bool:
    """Whether INT8 weights (blocks of 128, as `--target-quant int8` exports them) make a
    2-row pass at most PAYS of INT4's relative cost."""
    return pays(report, "int8-b128", "int4-b128")


def table(report: dict) -> str:
    any_rows = next((v["rows"] for v in report["variants"].values() if v.get("rows")), {})
    rows = [int(m) for m in any_rows]
    where = report.get("gpu") or report["device"]
    lines = [
        f"MatMulNBits against rows: {report['shape']}'s matmuls, {report['dtype']}, on {where} "
        f"(onnxruntime {report['onnxruntime']})",
        "| variant | 1 row (ms) | " + " | ".join(f"t({m})/t(1)" for m in rows[1:]) + " |",
        "|---" * (len(rows) + 1) + "|",
    ]
    for name, entry in report["variants"].items():
        if "error" in entry:
            lines.append(f"| {name} | failed: {entry['error'][:120]} |")
            continue
        cells = " | ".join(f"{ratio(entry, m):.2f}" for m in rows[1:])
        label = name + (" (no CUDA graphs)" if entry.get("cuda_graphs") is False else "")
        lines.append(f"| {label} | {entry['rows']['1']['ms']:.3f} | {cells} |")
    for name, entry in report["variants"].items():
        kernels = sorted({(k["M"], k["kernel"]) for k in entry.get("fpa_kernels", [])})
        if kernels:
            lines.append(f"{name}: " + ", ".join(f"M={m} {kernel}" for m, kernel in kernels))
        elif entry.get("fpa") and entry.get("rows") and report["device"] == "cuda":
            lines.append(f"{name}: fpA_intB not taken (ONNX Runtime printed no fpA_intB line)")
    block = fpa_pays(report)
    lines.append(f"fpA_intB pays: blocks of {block}" if block else "fpA_intB pays: no")
    lines.append(f"INT8 pays: {'yes' if int8_pays(report) else 'no'}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(s for s in SHAPES if not s.startswith("tiny")),
                    default="qwen2.5-1.5b")  # fmt: skip
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--smoke", action="store_true", help="CPU, a tiny shape, 3 row counts")
    ap.add_argument("--work", type=Path, help="where the graphs are written (default: /tmp)")
    ap.add_argument(
        "--beside-build",
        action="store_true",
        help="recorded in the JSON: a build or export ran on the CPUs meanwhile",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--report", type=Path, help="print the table of a JSON written before")
    ap.add_argument("--fpa-pays", type=Path, help="print the block size whose fpA_intB pays")
    ap.add_argument("--int8-pays", type=Path, help='print "int8" where INT8 weights pay')
    args = ap.parse_args()
    if args.report or args.fpa_pays or args.int8_pays:
        report = json.loads((args.report or args.fpa_pays or args.int8_pays).read_text())
        if args.report:
            print(table(report))
        elif args.fpa_pays:
            print(fpa_pays(report) or "")
        else:
            print("int8" if int8_pays(report) else "")
        return
    if args.smoke:
        args.device, args.rounds = "cpu", min(args.rounds, 3)
    args.shape_obj = SMOKE_SHAPE if args.smoke else SHAPES[args.shape]
    if args.smoke:
        args.shape = "tiny"
    print(table(measure(args)))


if __name__ == "__main__":
    main()
