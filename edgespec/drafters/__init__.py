from edgespec.drafters.base import Acceptance, Draft, Drafter, Offer
from edgespec.drafters.eagle import EagleDrafter
from edgespec.drafters.model import ModelDrafter
from edgespec.drafters.ngram import NgramDrafter

__all__ = [
    "Acceptance",
    "Draft",
    "Drafter",
    "EagleDrafter",
    "ModelDrafter",
    "NgramDrafter",
    "Offer",
]
