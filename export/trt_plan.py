"""The TensorRT engine build plan: pure functions of a bundle's files, no TensorRT needed.

An engine is built on the device that runs it (export/trt_build.py, or deploy/jetson's
build_engines.sh with trtexec). What it is built with is decided here, so it can be tested
on any machine and written into the bundle before a GPU ever sees it:

- optimization profiles: profile 0 for prompt processing (1..prefill_max tokens, logits for
  1..prefill_max rows), then one profile per verify width w = 1..K+1 with every shape fixed
  (w tokens, w logit rows): each width gets kernels tuned for it and one CUDA graph;
- the KV buffers' shape [1, n_kv_head, capacity, head_dim], the same in every profile, so one
  pair of buffers serves every width;
- where the graph holds Q/DQ and the precision of every weight, read from the ONNX graph;
- which weight precision a device gets and why (precision_for_device).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from edgespec.errors import EdgespecError
from edgespec.runtimes.model_folder import read_model_json

TRT_TARGET_QUANTS = ("fp8", "int4", "fp16")
TRT_DRAFT_QUANTS = ("fp16", "fp8")
DEFAULT_WIDTHS = tuple(range(1, 10))  # k = 0..8, the controller's default k_max
PREFILL_MAX = 512
FP8_MIN_CC = (8, 9)  # FP8 tensor cores: Ada (8.9), Hopper (9.0), Blackwell, Thor (11.0)
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Profile:
    name: str
    shapes: dict[str, tuple[Shape, Shape, Shape]]  # input -> (min, opt, max)


@dataclass(frozen=True)
class WeightPlan:
    tensor: str  # the initializer a weight MatMul reads
    precision: str  # int4 | fp8 | fp16 | fp32
    qdq: str  # the DequantizeLinear in front of it, or "none"


@dataclass(frozen=True)
class EnginePlan:
    role: str
    model: str  # the model folder, relative to the bundle
    engine: str  # the engine file the build writes, relative to the bundle
    capacity: int  # KV buffer rows = the longest context the engine serves
    widths: tuple[int, ...]
    profiles: tuple[Profile, ...]
    weights: tuple[WeightPlan, ...]
    activations: dict[str, str]  # what runs in which precision besides the weights

    def to_json(self) -> dict:
        return asdict(self)


def parse_widths(text: str) -> tuple[int, ...]:
    """--verify-widths: "1..9" or "1,2,3,5"; every verify step forwards k + 1 tokens."""
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split(".."))
            widths = tuple(range(lo, hi + 1))
        else:
            widths = tuple(sorted({int(x) for x in text.split(",")}))
    except ValueError:
        widths = ()
    if not widths or widths[0] < 1 or widths[-1] > 64:
        raise EdgespecError(
            f"--verify-widths {text!r} is not a range of widths between 1 and 64; "
            "write it as 1..9 (k + 1 for k up to 8) or as a list: 1,2,3,5"
        )
    return widths


def plan_engine(
    bundle_dir: Path,
    role: str,
    model: str,
    widths: tuple[int, ...] = DEFAULT_WIDTHS,
    capacity: int = 4096,
    prefill_max: int = PREFILL_MAX,
) -> EnginePlan:
    """The plan for one role's standard-flavour model folder (model.json + model.onnx)."""
    folder = bundle_dir / model
    info = read_model_json(folder)  # every field checked (runtimes/model_folder.py)
    if info.get("context_length") is None:
        raise EdgespecError(
            f"{folder / 'model.json'} gives no context_length, which an engine's KV buffers "
            "are sized by; export the model again"
        )
    if info.get("flavour") != "standard":
        raise EdgespecError(
            f"{folder} is not a standard-operator ONNX model (model.json flavour "
            f"{info.get('flavour', 'ort')!r}); export it with --format tensorrt"
        )
    capacity = min(capacity, int(info["context_length"]))
    kv = (1, int(info["n_kv_head"]), capacity, int(info["head_dim"]))
    fixed = {
        "position": ((1,), (1,), (1,)),
        **{f"past_key_values.{i}.{kind}": (kv, kv, kv) for i in range(int(info["n_layer"]))
           for kind in ("key", "value")},
    }  # fmt: skip
    opt = min(128, prefill_max)
    prefill = Profile("prefill", {
        "input_ids": ((1, 1), (1, opt), (1, prefill_max)),
        "logit_rows": ((1,), (1,), (prefill_max,)),
        **fixed,
    })  # fmt: skip
    verify = tuple(
        Profile(f"width{w}", {"input_ids": ((1, w),) * 3, "logit_rows": ((w,),) * 3, **fixed})
        for w in widths
    )
    compute = info.get("compute", "fp16")
    return EnginePlan(
        role=role,
        model=model,
        engine=f"engines/{Path(model).name}.engine",
        capacity=capacity,
        widths=tuple(widths),
        profiles=(prefill, *verify),
        weights=weight_plan(folder / info.get("model_file", "model.onnx")),
        activations={
            "activations and KV cache": compute,
            "RMSNorm, attention scores and softmax": "fp32",
            "logits": "fp32",
            "embedding table": "fp32" if info["quant"] == "fp32" else "fp16",
        },
    )


def weight_plan(onnx_file: Path) -> tuple[WeightPlan, ...]:
    """Each weight MatMul's stored precision and the Q/DQ in front of it, from the graph
    alone (the weights themselves are not read)."""
    import onnx

    graph = onnx.load(str(onnx_file), load_external_data=False).graph
    kinds = {t.name: t.data_type for t in graph.initializer}
    made_by = {out: node for node in graph.node for out in node.output}
    names = {onnx.TensorProto.INT4: "int4", onnx.TensorProto.FLOAT8E4M3FN: "fp8",
             onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.FLOAT: "fp32"}  # fmt: skip
    plans = []
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        source = made_by.get(node.input[1])
        if node.input[1] in kinds:
            plans.append(WeightPlan(node.input[1], names[kinds[node.input[1]]], "none"))
        elif source is not None and source.input[0] in kinds:  # DequantizeLinear or Cast
            weight = source.input[0]
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in source.attribute}
            if source.op_type == "DequantizeLinear":
                block = f", block {attrs['block_size']}" if attrs.get("block_size") else ""
                qdq = f"DequantizeLinear axis {attrs.get('axis', 1)}{block}"
            else:
                qdq = "none (Cast to the compute type)"
            plans.append(WeightPlan(weight, names[kinds[weight]], qdq))
    return tuple(plans)


@dataclass(frozen=True)
class DevicePrecision:
    target: str
    draft: str
    reason: str


def precision_for_device(
    compute_capability: tuple[int, int] | None,
    target: str | None = None,
    draft: str | None = None,
) -> DevicePrecision:
    """The weights a TensorRT build uses on a GPU of this compute capability (None: unknown,
    no GPU here), the user's choice where given. FP8 needs FP8 tensor cores (sm_89+): Jetson
    Orin (sm_87) gets INT4 weight-only (or FP16), Thor (sm_110) and RTX 40/50 FP8. The
    drafter stays FP16: it is small, and a coarser drafter loses acceptance."""
    for name, allowed in ((target, TRT_TARGET_QUANTS), (draft, TRT_DRAFT_QUANTS)):
        if name is not None and name not in allowed:
            raise EdgespecError(
                f"precision {name!r} is not available for --format tensorrt; choose one of "
                f"{', '.join(allowed)}"
            )
    has_fp8 = compute_capability is not None and compute_capability >= FP8_MIN_CC
    where = (
        f"compute capability {compute_capability[0]}.{compute_capability[1]}"
        if compute_capability
        else "no GPU seen here"
    )
    if target == "fp8" and compute_capability is not None and not has_fp8:
        raise EdgespecError(
            f"--target-quant fp8 needs FP8 tensor cores (compute capability 8.9 or newer); "
            f"this GPU has {where}: use --target-quant int4 (or fp16)"
        )
    if target:
        reason = f"chosen on the command line ({where})"
    elif has_fp8:
        reason = f"{where}: FP8 tensor cores, FP8 E4M3 per-channel weights"
    elif compute_capability is not None:
        reason = f"{where}: no FP8 tensor cores, INT4 block weights (weight-only)"
    else:
        reason = (
            f"{where}: INT4 block weights, which every TensorRT target can take (FP16 where a "
            "TensorRT version refuses INT4 block DQ); pass --target-quant fp8 for Thor or RTX 40+"
        )
    return DevicePrecision(target or ("fp8" if has_fp8 else "int4"), draft or "fp16", reason)


def build_script(plans: list[EnginePlan]) -> str:
    """build_engines.sh: finish a TensorRT bundle on the device that will run it, with
    edgespec's Python builder where the tensorrt module imports, else with trtexec."""
    lines = [
        "#!/usr/bin/env bash",
        "# Build this bundle's TensorRT engines on the device that will run them (engines",
        "# are specific to a GPU and a TensorRT version). Written by `edgespec export",
        "# --format tensorrt`; the plan is engines/plan.json.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        "mkdir -p engines",
        'if python3 -c "import tensorrt" 2>/dev/null || python3 -c "import tensorrt_rtx" \\',
        "    2>/dev/null; then",
        "  exec python3 -m edgespec.export.trt_build .",
        "fi",
        "TRTEXEC=${TRTEXEC:-$(command -v trtexec || echo /usr/src/tensorrt/bin/trtexec)}",
        "# no tensorrt Python module: trtexec, one --minShapes/--optShapes/--maxShapes group",
        "# per profile (NOT YET RUN: check `trtexec --help` on your TensorRT for how it takes",
        "# several profiles); the engines' metadata is written by --describe-only afterwards",
    ]
    for plan in plans:
        profiles = " ".join(trtexec_profile(p) for p in plan.profiles)
        lines += [
            f"# {plan.role}: {plan.model}",
            f'"$TRTEXEC" --onnx={plan.model}/model.onnx --stronglyTyped \\',
            f"  --saveEngine={plan.engine} --timingCacheFile=engines/timing.cache \\",
            f"  {profiles}",
        ]
    lines.append("python3 -m edgespec.export.trt_build . --describe-only")
    return "\n".join(lines) + "\n"


def trtexec_profile(profile: Profile) -> str:
    """trtexec's --profile=N --minShapes=... --optShapes=... --maxShapes=... for one profile
    (the KV inputs spelled out: trtexec needs every dynamic input in every profile)."""
    parts = []
    for flag, i in (("minShapes", 0), ("optShapes", 1), ("maxShapes", 2)):
        shapes = ",".join(
            f"{name}:{'x'.join(str(d) for d in dims[i])}" for name, dims in profile.shapes.items()
        )
        parts.append(f"--{flag}={shapes}")
    return " ".join(parts)
