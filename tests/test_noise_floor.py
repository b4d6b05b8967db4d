"""The rows at the noise's bound (`testing.noise_floor`): the built seed makes its token draw the
largest noise murmur3 can, and nothing else does (CPU, Triton's interpreter)."""

import pytest

from vllm_hotpaths.testing.noise_floor import murmur3_floor_seed, murmur3_hash, noise_of

MURMUR3 = (False, True)


@pytest.mark.parametrize("seed_low, pos, token", [(0, 0, 0), (0xDEADBEEF, 41, 1234), (7, 2**31 - 1, 151_935)])
def test_the_built_seed_draws_the_bound_at_its_token_only(seed_low, pos, token):
    seed = murmur3_floor_seed(seed_low, pos, token)
    assert seed & 0xFFFFFFFF == seed_low and -(2**63) <= seed < 2**63
    assert murmur3_hash(seed, pos, token) == 0
    (at_token, next_token, next_pos), bound = noise_of(seed, pos, [token, token + 1, token], MURMUR3, "cpu")
    assert at_token == bound and 22.8 < bound < 23.0
    assert next_token < bound
    (elsewhere,), _ = noise_of(seed, pos + 1, [token], MURMUR3, "cpu")
    assert elsewhere < bound

