from edgespec.drafters.base import Acceptance, Draft, Drafter, Offer
from edgespec.drafters.head import HeadDrafter
from edgespec.drafters.model import ModelDrafter
from edgespec.drafters.ngram import NgramDrafter

__all__ = [
    "Acceptance",
    "Draft",
    "Drafter",
    "HeadDrafter",
    "ModelDrafter",
    "NgramDrafter",
    "Offer",
]
