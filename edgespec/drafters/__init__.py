from edgespec.drafters.base import Draft, Drafter
from edgespec.drafters.model import ModelDrafter
from edgespec.drafters.ngram import NgramDrafter

__all__ = ["Draft", "Drafter", "ModelDrafter", "NgramDrafter"]
