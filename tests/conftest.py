import os
from pathlib import Path

import pytest

REQUIRE_REAL = os.environ.get("EDGESPEC_REQUIRE_REAL") == "1"


def pytest_configure(config) -> None:
    """The tests get a home of their own, sharing only the fetched models: a curve the tests
    calibrate on a busy machine must never land in the user's tune store, where every later
    `edgespec run` and benchmark would trust it."""
    import tempfile

    from edgespec.plumbing.paths import edgespec_home

    models = edgespec_home() / "models"
    home = Path(tempfile.mkdtemp(prefix="edgespec-test-home-"))
    if models.is_dir():
        (home / "models").symlink_to(models.resolve(), target_is_directory=True)
    os.environ["EDGESPEC_HOME"] = str(home)


def real_model(name: str) -> Path:
    """Path of a fetched demo model; skip (or fail under EDGESPEC_REQUIRE_REAL=1) if absent."""
    from edgespec.app.models import model_path
    from edgespec.errors import EdgespecError

    try:
        return model_path(name)
    except EdgespecError as e:
        if REQUIRE_REAL:
            pytest.fail(f"real model {name} is required here: {e}")
        pytest.skip(f"real model {name} not fetched (edgespec models fetch demo): {e}")


@pytest.fixture(scope="session")
def demo_target_path() -> Path:
    return real_model("demo-target")


@pytest.fixture(scope="session")
def demo_draft_path() -> Path:
    return real_model("demo-draft")


@pytest.fixture(scope="session")
def demo_runtimes(demo_target_path, demo_draft_path):
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    return (
        LlamaCppRuntime(demo_target_path, n_ctx=1024),
        LlamaCppRuntime(demo_draft_path, n_ctx=1024),
    )


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """Tiny float32 target and draft GGUF files sharing a real BPE vocabulary."""
    from tests.tiny_gguf import build_tiny_pair

    return build_tiny_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_runtimes(tiny_pair):
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    target, draft = tiny_pair
    return LlamaCppRuntime(target, n_ctx=512), LlamaCppRuntime(draft, n_ctx=512)
