"""Exceptions with messages that name the problem and the fix.

Every error a user can cause derives from EdgespecError; the CLI prints its message on one
line and exits 2 without a traceback.
"""


class EdgespecError(Exception):
    """Base class for errors caused by input: files, models, parameters, manifests."""


class ModelFileError(EdgespecError):
    """A model file is missing, truncated, corrupt or of an unsupported kind."""


class VocabularyMismatchError(EdgespecError):
    """Target and draft do not share a vocabulary, so draft tokens mean nothing to the target."""


class ContextOverflowError(EdgespecError):
    """The prompt does not fit in the context window."""


class SamplingParamsError(EdgespecError, ValueError):
    """A sampling value is out of range."""


class BundleError(EdgespecError):
    """bundle.json is missing, malformed, or disagrees with the files beside it."""
