import pytest

from swarmrl.tasks.math_verifier import MathVerifier


@pytest.fixture(scope="module")
def math_verifier():
    """A math verifier whose process pool is closed after the module's tests."""
    verifier = MathVerifier()
    yield verifier
    verifier.close()
