"""Length buckets: doubling, fixed steps, and the smallest bucket that fits."""
import pytest

from arenarl_jax.sampling.buckets import (bucket_length, cache_size_ladder, power_of_two_buckets,
                                          stepped_buckets)


def test_power_of_two_buckets_end_at_the_maximum():
  assert power_of_two_buckets(100, 16) == (16, 32, 64, 100)
  assert power_of_two_buckets(64, 16) == (16, 32, 64)


def test_stepped_buckets_double_up_to_two_steps_then_add_steps():
  assert stepped_buckets(1024, 64, 128) == (64, 128, 256, 384, 512, 640, 768, 896, 1024)
  assert stepped_buckets(1000, 16, 100) == (16, 32, 64, 128, 200, 300, 400, 500, 600, 700,
                                            800, 900, 1000)
  assert stepped_buckets(300, 64, 256) == (64, 128, 256, 300)  # the maximum comes first
  assert stepped_buckets(1024, 64, 0) == power_of_two_buckets(1024, 64)
  with pytest.raises(ValueError, match="bucket step must be >= 0"):
    stepped_buckets(1024, 64, -1)


@pytest.mark.parametrize("step", [0, 96, 128])
def test_every_length_gets_the_smallest_bucket_that_fits(step):
  buckets = stepped_buckets(2048, 64, step)
  assert list(buckets) == sorted(set(buckets))
  for n in range(1, 2049):
    b = bucket_length(n, buckets)
    assert b >= n and not any(n <= c < b for c in buckets)
    if step and n > 2 * step:
      assert b - n < step  # fixed steps bound the padding
  with pytest.raises(ValueError, match="prompt of 2049 tokens is longer than the largest bucket"):
    bucket_length(2049, buckets, what="prompt")


def test_cache_ladder_grows_by_a_third_rounded_to_multiples_of_32():
  # 32, 42 -> 64, 85 -> 96, 128, 170 -> 192, 256, 341 -> 352, 469 -> 480, 640, 853 -> 864,
  # 1152, then cache_len.
  assert cache_size_ladder(1500) == (32, 64, 96, 128, 192, 256, 352, 480, 640, 864, 1152, 1500)
  assert cache_size_ladder(192) == (32, 64, 96, 128, 192)
  assert len(cache_size_ladder(8192)) == 18
  assert cache_size_ladder(1500, growth=1.5) == (32, 64, 96, 160, 256, 384, 576, 864, 1312, 1500)
  assert cache_size_ladder(20) == (20,)
  assert cache_size_ladder(10, first=4, growth=2, multiple=1) == (4, 8, 10)
  assert cache_size_ladder(1024, first=128, multiple=128) == (128, 256, 384, 512, 768, 1024)
  with pytest.raises(ValueError, match="growth > 1"):
    cache_size_ladder(512, growth=1.0)
