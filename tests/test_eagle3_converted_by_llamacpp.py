"""An EAGLE-3 head as llama.cpp's own convert_hf_to_gguf.py writes it for the vendored build
(gguf-py's Keys.LLM TARGET_LAYERS, TARGET_HIDDEN_SIZE, NORM_BEFORE_FC, NORM_BEFORE_RESIDUAL,
the strings its libllama reads): the converter's extra keys (eagle3.vocab_size, the two norm
flags written false, target_layers an int32 array) and the head's own token_embd (SpecForge's
embed_tokens, a copy of the target's), written with the gguf package. It loads, its passes
equal the numpy reference and its drafts give plain decoding's output under --exact."""

from pathlib import Path

import numpy as np
import pytest

from edgespec.export.eagle3_gguf import ARCH, write_hparams
from tests.test_eagle import (
    CFG,
    check_head_matches_reference,
    check_output_equals_plain,
    open_target,
    plain_reference,
)
from tests.tiny_eagle import head_shape, head_weights, write_target_and_head
from tests.tiny_gguf import random_weights, vocabulary, write_tensors


def write_converted_head(path: Path) -> Path:
    """tiny_eagle's head (seed 7) in the layout llama.cpp's converter writes."""
    import gguf

    tokens, types, merges = vocabulary()
    shape = head_shape(CFG.n_embd, len(tokens))
    writer = gguf.GGUFWriter(str(path), ARCH)
    write_hparams(writer, shape, n_ctx=CFG.n_ctx, rope_theta=CFG.rope_theta,
                  rms_eps=CFG.rms_eps, dtype=np.dtype(np.float32),
                  name="edgespec-tiny-eagle3")  # fmt: skip
    writer.add_vocab_size(len(tokens))
    writer.add_bool(f"{ARCH}.norm_before_fc", False)
    writer.add_bool(f"{ARCH}.norm_before_residual", False)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    weights = head_weights(CFG.n_embd, len(tokens), 7)
    weights["token_embd.weight"] = random_weights(CFG, len(tokens), 0)["token_embd.weight"]
    return write_tensors(writer, weights, path)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("converted")
    target_path, _ = write_target_and_head(folder)
    target = open_target(target_path)
    return target, target.open_head(str(write_converted_head(folder / "converted.gguf")))


def test_the_converters_keys_are_there_as_written(pair, tmp_path):
    import gguf

    fields = gguf.GGUFReader(str(write_converted_head(tmp_path / "h.gguf"))).fields
    assert fields[f"{ARCH}.target_layers"].types == [gguf.GGUFValueType.ARRAY,
                                                     gguf.GGUFValueType.INT32]  # fmt: skip
    _, head = pair
    assert head.metadata(f"{ARCH}.norm_before_residual") == "false"
    assert head.metadata(f"{ARCH}.vocab_size") == str(head.n_vocab)
    assert head.layers == [1, 2, 3]


def test_a_head_converted_by_llamacpp_equals_the_numpy_reference(pair):
    target, head = pair
    check_head_matches_reference(target, head, plain_reference(target)[0], atol=0.02)


@pytest.mark.parametrize("k", [1, 4, 8])
def test_a_head_converted_by_llamacpp_gives_plain_output(pair, k):
    target, head = pair
    check_output_equals_plain(target, head, *plain_reference(target), k)
