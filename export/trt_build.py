"""Build a TensorRT bundle's engines on the device that will run them.

`python -m edgespec.export.trt_build BUNDLE` (what build_engines.sh runs, and what
`edgespec export --format tensorrt` calls where TensorRT and a GPU are present): for each
role, parse the standard-operator ONNX into a strongly typed network (explicit Q/DQ decide
every precision: the same code serves TensorRT 10.x, 11.x and TensorRT for RTX), add the
plan's optimization profiles (export/trt_plan.py), build with the bundle's timing cache, and
write engines/<model>.engine plus engines/<model>.json (the metadata a loader checks:
TensorRT flavour and version, GPU name and compute capability, the plan's widths and
capacity) and the same metadata into bundle.json's policy.tensorrt.engines.

INT4 block-quantized DequantizeLinear may not import on older TensorRT (JetPack 6 ships
10.3): when parsing or building an INT4 graph fails, the INT4 weights are dequantized to
FP16 in a copy of the graph (dequantize_int4_graph) and the build is retried, with a
warning that says so; the metadata records what the version accepted.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from types import ModuleType

import numpy as np

from edgespec.bundle import read_bundle, sha256_file, write_bundle
from edgespec.errors import EdgespecError
from edgespec.export.trt_plan import EnginePlan, plan_engine
from edgespec.runtimes.tensorrt import gpu_properties, import_tensorrt

log = logging.getLogger(__name__)


def build_bundle_engines(bundle_dir: Path, *, describe_only: bool = False) -> dict[str, dict]:
    """Engines for every tensorrt entry of the bundle; returns role -> engine metadata."""
    bundle = read_bundle(bundle_dir)
    settings = bundle.policy.get("tensorrt") or {}
    found = import_tensorrt()
    if found is None and not describe_only:
        raise EdgespecError(
            "neither tensorrt nor tensorrt_rtx imports here: install TensorRT (JetPack ships "
            "it; on an RTX desktop pip install tensorrt-rtx-cu13) or build with trtexec "
            f"through {bundle_dir / 'build_engines.sh'}"
        )
    gpu = gpu_properties()
    engines = {}
    for entry in bundle.models:
        if entry.format != "tensorrt":
            continue
        plan = plan_engine(
            bundle_dir, entry.role, entry.path, tuple(settings.get("widths") or (1,)),
            int(settings.get("capacity", 4096)), int(settings.get("prefill_max", 512)),
        )  # fmt: skip
        note = ""
        if not describe_only:
            assert found is not None
            note = build_engine(found[0], bundle_dir, plan)
        engines[entry.role] = describe(bundle_dir, plan, found, gpu, note)
        (bundle_dir / plan.engine).with_suffix(".json").write_text(
            json.dumps(engines[entry.role], indent=1) + "\n"
        )
    policy = dict(bundle.policy)
    policy["tensorrt"] = {**settings, "engines": engines}
    write_bundle(type(bundle)(bundle.folder, bundle.models, bundle.tokenizer, policy, bundle.tune))
    return engines


def describe(
    bundle_dir: Path,
    plan: EnginePlan,
    found: tuple[ModuleType, str] | None,
    gpu: tuple[str, tuple[int, int]] | None,
    note: str,
) -> dict:
    engine = bundle_dir / plan.engine
    if not engine.is_file():
        raise EdgespecError(f"{engine} is missing: build it first (bash build_engines.sh)")
    return {
        "engine": Path(plan.engine).name,
        "sha256": sha256_file(engine),
        "flavour": found[1] if found else "tensorrt",
        "version": str(found[0].__version__) if found else "unknown (trtexec)",
        "device": gpu[0] if gpu else "unknown",
        "compute_capability": f"{gpu[1][0]}.{gpu[1][1]}" if gpu else "unknown",
        "capacity": plan.capacity,
        "widths": list(plan.widths),
        "prefill_max": plan.profiles[0].shapes["input_ids"][2][1],
        "note": note,
    }


def build_engine(trt: ModuleType, bundle_dir: Path, plan: EnginePlan) -> str:
    """Build plan.engine; returns a note ("" or why the weights changed precision)."""
    onnx_file = bundle_dir / plan.model / "model.onnx"
    try:
        build_serialized(trt, onnx_file, bundle_dir, plan)
        return ""
    except EdgespecError as e:
        if not any(w.precision == "int4" for w in plan.weights):
            raise
        fp16_dir = bundle_dir / "engines" / f"{Path(plan.model).name}.fp16-onnx"
        dequantize_int4_graph(onnx_file, fp16_dir)
        note = (
            f"TensorRT {trt.__version__} did not accept INT4 block DequantizeLinear ({e}); "
            "the engine holds FP16 weights instead (twice the INT4 memory)"
        )
        log.warning("%s: %s", plan.role, note)
        build_serialized(trt, fp16_dir / "model.onnx", bundle_dir, plan)
        return note


def build_serialized(trt: ModuleType, onnx_file: Path, bundle_dir: Path, plan: EnginePlan) -> None:
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    try:  # TensorRT 11 and TensorRT for RTX: strongly typed is the only kind
        network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    except (AttributeError, TypeError):
        network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_file)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise EdgespecError(f"TensorRT could not parse {onnx_file}: {errors[:500]}")
    config = builder.create_builder_config()
    cache_file, timing_cache = bundle_dir / "engines" / "timing.cache", True
    try:  # TensorRT for RTX compiles kernels just in time: it may have no timing cache
        cache = config.create_timing_cache(cache_file.read_bytes() if cache_file.is_file() else b"")
        config.set_timing_cache(cache, ignore_mismatch=False)
    except AttributeError:
        timing_cache = False
    for profile in plan.profiles:
        p = builder.create_optimization_profile()
        for name, (lo, opt, hi) in profile.shapes.items():
            p.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(p)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EdgespecError(f"TensorRT could not build {onnx_file} (see its log above)")
    engine = bundle_dir / plan.engine
    engine.parent.mkdir(parents=True, exist_ok=True)
    engine.write_bytes(bytes(serialized))
    if timing_cache:  # kept in the bundle: a rebuild on this device starts from it
        cache_file.write_bytes(bytes(config.get_timing_cache().serialize()))


def dequantize_int4_graph(onnx_file: Path, out_dir: Path) -> Path:
    """A copy of a standard-flavour graph with every INT4 block DequantizeLinear replaced by
    its FP16 (the scales' type) result as a constant: the fallback for a TensorRT that
    refuses INT4 block DQ. Runs on the CPU (tested against the INT4 graph)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_file))  # weights included: one model's worth of memory
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    kept, dropped = [], set()
    for node in graph.node:
        q = weights.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if q is None or q.data_type != onnx.TensorProto.INT4:
            kept.append(node)
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        codes = numpy_helper.to_array(q).astype(np.float32)  # [in, out]
        scales = numpy_helper.to_array(weights[node.input[1]])  # [in / block, out]
        full = np.repeat(scales.astype(np.float32), attrs["block_size"], axis=attrs["axis"])
        values = (codes * full[: codes.shape[0]]).astype(scales.dtype)
        graph.initializer.append(numpy_helper.from_array(values, node.output[0]))
        dropped |= {node.input[0], node.input[1]}
    del graph.node[:]
    graph.node.extend(kept)
    remaining = [t for t in graph.initializer if t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(remaining)
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(out_dir / "model.onnx"), save_as_external_data=True,
                    location="model.onnx.data", size_threshold=1024)  # fmt: skip
    return out_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgespec.export.trt_build", description=__doc__)
    p.add_argument("bundle", help="a bundle exported with --format tensorrt")
    p.add_argument(
        "--describe-only", action="store_true",
        help="the engines exist (trtexec built them): write their metadata only",
    )  # fmt: skip
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    built = build_bundle_engines(Path(args.bundle), describe_only=args.describe_only)
    for role, meta in built.items():
        log.info("%s: %s (%s %s, %s, sm %s)", role, meta["engine"], meta["flavour"],
                 meta["version"], meta["device"], meta["compute_capability"])  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
