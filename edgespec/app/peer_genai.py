"""The ONNX Runtime peer: onnxruntime-genai's own speculative decoding, run beside ours in
`edgespec bench` on the very graphs edgespec's ONNX back-end runs (the bundle's target and draft).

Its methods, each divided by onnxruntime-genai's own plain decoding on the same prompts:
- onnxruntime-genai-draft: the draft model proposes (`model.draft`), max_draft_tokens 4, its
  default (docs/SpeculativeDecoding.md of onnxruntime-genai 0.18);
- onnxruntime-genai-ngram: n-gram lookup over the committed tokens, with the settings its
  documentation shows (ngram_size 4, max_draft_tokens 8, chained lookup, adaptive width from 2).

onnxruntime-genai feeds a decoder `attention_mask` [1, tokens so far]; edgespec's graph takes
seqlens_k, total_sequence_length and logits_start instead (export/onnx_export.py). genai_graph
writes a copy of the graph, not of the weights (model.onnx.data is hard-linked), whose first
nodes derive those three from the mask as onnxruntime-genai's own model builder does:
seqlens_k = sum(mask) - 1, total_sequence_length = mask.shape[1], and every row's logits.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from edgespec.errors import EdgespecError
from edgespec.runtimes.model_folder import read_model_json

GENAI_PLAIN = "onnxruntime-genai"
GENAI_DRAFT = "onnxruntime-genai-draft"
GENAI_NGRAM = "onnxruntime-genai-ngram"
DRAFT_K = 4  # speculative.max_draft_tokens' default
NGRAM_OPTIONS = {  # the n-gram example of its documentation
    "ngram_size": 4,
    "max_draft_tokens": 8,
    "ngram_chained_lookup": True,
    "min_adaptive_k": 2,
}
DERIVED_INPUTS = ("seqlens_k", "total_sequence_length", "logits_start")


def genai_graph(model_dir: Path, out_dir: Path) -> Path:
    """out_dir/model.onnx: model_dir's graph taking attention_mask for DERIVED_INPUTS, over the
    same weights (model.onnx.data linked, or copied across file systems)."""
    import onnx
    from onnx import TensorProto, helper

    try:
        model = onnx.load(str(model_dir / "model.onnx"), load_external_data=False)
    except Exception as e:  # protobuf's DecodeError, OSError, ...
        raise EdgespecError(
            f"{model_dir / 'model.onnx'} is not a readable ONNX graph ({type(e).__name__}); "
            "export the bundle again"
        ) from None
    graph = model.graph
    names = [i.name for i in graph.input]
    if not set(DERIVED_INPUTS) <= set(names):
        raise EdgespecError(
            f"{model_dir} is not an edgespec ONNX Runtime export (its graph takes no "
            f"{', '.join(DERIVED_INPUTS)}); onnxruntime-genai runs the default --format onnx"
        )
    kept = [i for i in graph.input if i.name not in DERIVED_INPUTS]
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, "total_length"])
    del graph.input[:]
    graph.input.extend([kept[0], mask, *kept[1:]])
    graph.initializer.extend(
        [
            helper.make_tensor("genai_axis", TensorProto.INT64, [1], [1]),
            helper.make_tensor("genai_one", TensorProto.INT64, [1], [1]),
            helper.make_tensor("genai_dim", TensorProto.INT64, [], [1]),
            helper.make_tensor("genai_zero", TensorProto.INT64, [1], [0]),
        ]
    )
    derive = [
        helper.make_node("ReduceSum", ["attention_mask", "genai_axis"], ["genai_n"], keepdims=0),
        helper.make_node("Sub", ["genai_n", "genai_one"], ["genai_last"]),
        helper.make_node("Cast", ["genai_last"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["genai_shape"]),
        helper.make_node("Gather", ["genai_shape", "genai_dim"], ["genai_total"], axis=0),
        helper.make_node("Cast", ["genai_total"], ["total_sequence_length"], to=TensorProto.INT32),
        helper.make_node("Identity", ["genai_zero"], ["logits_start"]),
    ]
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(derive + nodes)
    out_dir.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_dir / "model.onnx"))
    data = model_dir / "model.onnx.data"
    if data.exists():  # ONNX Runtime refuses external data reached through a symbolic link
        try:
            os.link(data, out_dir / data.name)
        except OSError:
            shutil.copyfile(data, out_dir / data.name)
    return out_dir / "model.onnx"


def decoder_block(info: dict, filename: str, threads: int | None) -> dict:
    session: dict = {"provider_options": []}
    if threads:
        session["intra_op_num_threads"] = threads
    return {
        "session_options": session,
        "filename": filename,
        "head_size": info["head_dim"],
        "hidden_size": info["n_embd"],
        "num_attention_heads": info["n_head"],
        "num_key_value_heads": info["n_kv_head"],
        "num_hidden_layers": info["n_layer"],
        "inputs": {
            "input_ids": "input_ids",
            "attention_mask": "attention_mask",
            "past_key_names": "past_key_values.%d.key",
            "past_value_names": "past_key_values.%d.value",
        },
        "outputs": {
            "logits": "logits",
            "present_key_names": "present.%d.key",
            "present_value_names": "present.%d.value",
        },
    }


def genai_config(
    target: dict, draft: dict | None, eog_ids: Sequence[int], n_ctx: int, threads: int | None
) -> dict:
    """genai_config.json for target/model.onnx (and draft/model.onnx): greedy, the KV cache
    allocated once and shared by past and present, as edgespec's runtime binds it."""
    model = {
        "type": "decoder",
        "vocab_size": target["n_vocab"],
        "context_length": n_ctx,
        "eos_token_id": list(eog_ids),
        "pad_token_id": eog_ids[0] if eog_ids else 0,  # batch 1: never padded
        "decoder": decoder_block(target, "target/model.onnx", threads),
    }
    if target.get("bos_id") is not None:  # never fed: prompts come as tokens
        model["bos_token_id"] = target["bos_id"]
    if draft is not None:
        model["draft"] = decoder_block(draft, "draft/model.onnx", threads)
    search = {"max_length": n_ctx, "past_present_share_buffer": True, "do_sample": False}
    return {"model": model, "search": search}


class GenaiPeer:
    """onnxruntime-genai on the pair's ONNX graphs: one model for plain and n-gram decoding,
    one with the draft model for draft decoding (a configured draft is always used)."""

    def __init__(self, target_dir: Path, draft_dir: Path | None, eog_ids, n_ctx: int, threads):
        try:
            import onnxruntime_genai as og
        except ImportError:
            raise EdgespecError(
                f"method {GENAI_DRAFT} and {GENAI_NGRAM} need onnxruntime-genai: "
                "pip install 'edgespec[peers]'"
            ) from None
        self.og = og
        self.eog_ids = set(eog_ids)
        self.work = Path(tempfile.mkdtemp(prefix="edgespec-genai-"))
        try:
            self.models = self.open_models(target_dir, draft_dir, n_ctx, threads)
        except BaseException:
            shutil.rmtree(self.work, ignore_errors=True)
            raise

    def open_models(self, target_dir: Path, draft_dir: Path | None, n_ctx: int, threads) -> dict:
        """genai Models by method: one on the target alone, one with the draft model."""
        target_info = read_model_json(target_dir)  # checked: sizes go into genai_config
        genai_graph(target_dir, self.work / "graphs" / "target")
        plain = self.open("plain", target_info, None, n_ctx, threads)
        models = {GENAI_PLAIN: plain, GENAI_NGRAM: plain}
        if draft_dir is not None:
            genai_graph(draft_dir, self.work / "graphs" / "draft")
            draft_info = read_model_json(draft_dir)
            models[GENAI_DRAFT] = self.open("draft", target_info, draft_info, n_ctx, threads)
        return models

    def open(self, name: str, target: dict, draft: dict | None, n_ctx: int, threads):
        folder = self.work / name
        folder.mkdir()
        graphs = self.work / "graphs"
        (folder / "target").symlink_to(graphs / "target")  # genai_config takes no ".." path
        if draft is not None:
            (folder / "draft").symlink_to(graphs / "draft")
        config = genai_config(target, draft, sorted(self.eog_ids), n_ctx, threads)
        (folder / "genai_config.json").write_text(json.dumps(config, indent=1))
        return self.og.Model(str(folder))

    def options(self, method: str, k: int | None) -> dict | None:
        if method == GENAI_DRAFT:
            return {"max_draft_tokens": k or DRAFT_K}
        if method == GENAI_NGRAM:
            return dict(NGRAM_OPTIONS)
        return None

    def generate(
        self, method: str, k: int | None, toks: Sequence[int], budget: int
    ) -> tuple[list[int], float, dict]:
        """Greedy tokens (end of generation excluded), the seconds after the prompt's prefill,
        and the speculative statistics in edgespec's names."""
        if method not in self.models:
            raise EdgespecError(f"method {method} needs a draft model: pass --draft")
        params = self.og.GeneratorParams(self.models[method])
        params.set_search_options(max_length=len(toks) + budget, do_sample=False)
        options = self.options(method, k)
        if options:
            params.set_speculative_options(**options)
        generator = self.og.Generator(self.models[method], params)
        generator.append_tokens(list(toks))
        t_start = time.perf_counter()
        while not generator.is_done():
            generator.generate_next_token()
        seconds = time.perf_counter() - t_start
        out = [int(t) for t in generator.get_sequence(0)[len(toks) :]]
        while out and out[-1] in self.eog_ids:
            out.pop()
        return out, seconds, self.stats(generator) if options else {}

    @staticmethod
    def stats(generator) -> dict:
        s = generator.get_speculative_stats()
        plain_steps = int(s["standard_fallback_steps"])  # n-gram misses: one-token passes
        return {
            "n_draft_tokens": int(s["draft_tokens_proposed"]),
            "n_accepted": int(s["draft_tokens_accepted"]),
            # its speculative passes: verifications, and re-anchoring one-token passes
            "n_steps": int(s["target_forward_passes"]) + plain_steps,
            "n_plain_steps": plain_steps,
            "t_draft": float(s["total_draft_ms"]) / 1e3,
        }  # no t_verify: its target time leaves out the n-gram misses' passes

    def close(self) -> None:
        self.models.clear()
        shutil.rmtree(self.work, ignore_errors=True)
