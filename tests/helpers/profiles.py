"""Hypothesis profiles, picked by ``HYPOTHESIS_PROFILE`` (tests/conftest.py loads it).

- ``ci`` (the default): 60 examples a test, derandomized, so every run draws the same cases.
- ``dev``: 200 random examples a test.
- ``soak``: 3000 random examples a test, for a long search by hand (an hour or more).

Tests that draw fewer examples than the profile (the interpreted kernels are slow) take
:func:`examples`, which scales their count with the loaded profile.
"""

from hypothesis import HealthCheck, settings

CI_EXAMPLES = 60

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,  # the first call of a torch op can be slow
    max_examples=CI_EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.register_profile(
    "soak", deadline=None, max_examples=3000, suppress_health_check=[HealthCheck.too_slow]
)


def examples(count: int) -> settings:
    """``count`` examples under ``ci``, scaled as the loaded profile scales ``ci``'s."""
    return settings(max_examples=max(1, count * settings.default.max_examples // CI_EXAMPLES))
