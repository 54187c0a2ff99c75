"""edgespec: lossless speculative decoding on one device.

    from edgespec import load_decoder, SamplingParams
    decoder = load_decoder("target.gguf", "draft.gguf")
    print(decoder.generate("def fib(n):", max_tokens=64).text)

Importing edgespec loads the numpy core and nothing heavier: the engine (SpeculativeDecoder,
Event, Result, Stats) with what it imports (controller, drafters, verify, sampling,
textstream, errors) and the Runtime protocol (edgespec.runtime). No back-end library
(llama-cpp-python, onnxruntime, onnx, gguf) is imported until load_decoder is first called:
it imports edgespec.loader, which opens each model with the back-end its format needs.
"""

from edgespec.engine import Event, Result, SpeculativeDecoder, Stats
from edgespec.errors import EdgespecError
from edgespec.sampling import SamplingParams

__version__ = "0.1.0"


def load_decoder(*args, **kwargs) -> SpeculativeDecoder:
    """See edgespec.loader.load_decoder (imported lazily: it pulls in the back-ends)."""
    from edgespec.loader import load_decoder as load

    return load(*args, **kwargs)


__all__ = [
    "EdgespecError",
    "Event",
    "Result",
    "SamplingParams",
    "SpeculativeDecoder",
    "Stats",
    "load_decoder",
]
