"""How much RAM `serve` keeps conversation states in: what --cache-ram asks, else a share of the memory free
once the model is loaded, capped at the default."""

from localspec.apps.server.run import cache_ram_for
from localspec.config import CACHE_RAM_MIB, CACHE_RAM_SHARE

MIB = 2**20


def test_the_asked_size_wins_even_zero():
    assert cache_ram_for(0, 64 * 1024 * MIB) == (0, "--cache-ram")
    assert cache_ram_for(100 * MIB, None) == (100 * MIB, "--cache-ram")


def test_a_share_of_free_memory_and_the_report_says_so():
    size, why = cache_ram_for(None, 6000 * MIB)
    assert size == int(6000 * MIB * CACHE_RAM_SHARE) < CACHE_RAM_MIB * MIB
    assert "6000 MiB free" in why and "--cache-ram" in why


def test_plenty_of_memory_is_capped_and_unknown_memory_takes_the_cap():
    assert cache_ram_for(None, 10**6 * MIB)[0] == CACHE_RAM_MIB * MIB
    size, why = cache_ram_for(None, None)
    assert size == CACHE_RAM_MIB * MIB and "unknown" in why
