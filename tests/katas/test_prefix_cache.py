"""Hidden suite for the prefix_cache kata: automatic prefix caching over a pool of KV blocks.

Everything is checked against `Oracle`, a brute-force model written here: it names a cached block by
its whole prefix (salt and every token from the start through the block's end), finds hits by
comparing prefixes, and picks the block to evict by scanning every candidate. The kata's block ids are
its own; the oracle learns which id holds which prefix from the tables the kata returns, and checks
that a hit shares that very block, a fresh block was taken from nobody, and the counts agree.
"""

from __future__ import annotations

import re

import pytest

from dojo import seeds
from dojo.testing import expect_raises

KATA = "prefix_cache"


# --------------------------------------------------------------------------- the oracle


class Oracle:
    """What the pool must hold: cached prefixes (with their users and when they were let go), plain
    blocks, and each request's tokens. Block ids are learned from the kata (`block_of`)."""

    def __init__(self, num_blocks: int, block_size: int):
        self.n, self.bs = num_blocks, block_size
        self.users: dict[tuple, int] = {}  # cached prefix -> requests using its block
        self.since: dict[tuple, tuple[int, int]] = {}  # evictable prefix -> (free call, order in it)
        self.plain_free = num_blocks
        self.requests: dict[int, dict] = {}  # id -> {"salt", "tokens", "keys": [prefix or None]}
        self.block_of: dict[tuple, int] = {}  # cached prefix -> the kata's block id
        self.clock = 0

    def key(self, salt, tokens, i: int) -> tuple:
        return (salt, tuple(tokens[: (i + 1) * self.bs]))

    def hits(self, tokens, salt) -> int:
        k = 0
        while (k + 1) * self.bs <= len(tokens) - 1 and self.key(salt, tokens, k) in self.users:
            k += 1
        return k

    @property
    def num_free(self) -> int:
        return self.plain_free + len(self.since)

    def needed(self, have_blocks: int, total_tokens: int) -> int:
        return -(-total_tokens // self.bs) - have_blocks

    def can_add(self, tokens, salt) -> bool:
        hits = self.hits(tokens, salt)
        taken = sum(1 for i in range(hits) if self.users[self.key(salt, tokens, i)] == 0)
        return self.needed(hits, len(tokens)) <= self.num_free - taken

    def allocate(self) -> tuple | None:
        """Take a block: a plain free one, else evict; returns the evicted prefix (or None)."""
        if self.plain_free:
            self.plain_free -= 1
            return None
        victim = min(self.since, key=self.since.get)
        del self.since[victim], self.users[victim]
        self.block_of.pop(victim, None)
        return victim

    def add(self, rid: int, tokens, salt) -> tuple[int, list]:
        """Returns (hit blocks, prefixes evicted in order)."""
        hits = self.hits(tokens, salt)
        req = {"salt": salt, "tokens": [], "keys": []}
        for i in range(hits):
            key = self.key(salt, tokens, i)
            self.users[key] += 1
            self.since.pop(key, None)
            req["keys"].append(key)
        req["tokens"] = list(tokens[: hits * self.bs])
        self.requests[rid] = req
        return hits, self.grow(req, tokens[hits * self.bs :])

    def grow(self, req: dict, tokens) -> list:
        evicted = []
        for t in tokens:
            if len(req["tokens"]) == len(req["keys"]) * self.bs:
                victim = self.allocate()
                if victim is not None:
                    evicted.append(victim)
                req["keys"].append(None)  # plain until it fills
            req["tokens"].append(t)
            if len(req["tokens"]) % self.bs == 0:
                key = self.key(req["salt"], req["tokens"], len(req["tokens"]) // self.bs - 1)
                if key not in self.users:  # the first block to hold a prefix is the cached one
                    self.users[key] = 1
                    req["keys"][-1] = key
        return evicted

    def append(self, rid: int, tokens) -> list:
        return self.grow(self.requests[rid], tokens)

    def can_append(self, rid: int, tokens) -> bool:
        req = self.requests[rid]
        return self.needed(len(req["keys"]), len(req["tokens"]) + len(tokens)) <= self.num_free

    def free(self, rid: int) -> None:
        req = self.requests.pop(rid)
        self.clock += 1
        order = 0
        for key in reversed(req["keys"]):
            if key is None:
                self.plain_free += 1
                continue
            self.users[key] -= 1
            if self.users[key] == 0:
                self.since[key] = (self.clock, order)
                order += 1

    def show(self, key: tuple) -> str:
        salt, tokens = key
        return f"{list(tokens)}" + (f" (salt {salt!r})" if salt is not None else "")


# --------------------------------------------------------------------------- helpers


def raises(exc_type, fn, what: str) -> str:
    return re.sub(r"(?<=\d)[,_](?=\d)", "", str(expect_raises(exc_type, fn, what)))


class Checked:
    """The kata's PrefixCache and the oracle side by side; every step compares them."""

    def __init__(self, kata, num_blocks: int, block_size: int):
        self.kata, self.cache = kata, kata.PrefixCache(num_blocks, block_size)
        self.oracle = Oracle(num_blocks, block_size)
        self.log: list[str] = []

    def where(self) -> str:
        steps = self.log[-8:]
        more = f"... ({len(self.log) - 8} steps before)\n" if len(self.log) > 8 else ""
        pool = f"PrefixCache(num_blocks={self.oracle.n}, block_size={self.oracle.bs})"
        return f"\nafter {pool}:\n{more}" + "\n".join(f"  {s}" for s in steps)

    def add(self, rid: int, tokens, salt=None) -> int:
        call = f"add({rid}, {list(tokens)}" + (f", salt={salt!r})" if salt is not None else ")")
        self.log.append(call)
        o = self.oracle
        if not o.can_add(tokens, salt):
            before = self.counts()
            raises(
                self.kata.OutOfBlocksError,
                lambda: self.cache.add(rid, tokens, salt=salt),
                call + self.where(),
            )
            assert self.counts() == before, (
                f"{call} raised OutOfBlocksError but changed the pool: (num_free, num_evictable, num_cached) "
                f"{before} -> {self.counts()}" + self.where()
            )
            self.log[-1] += "  -> OutOfBlocksError"
            return -1
        got = self.cache.add(rid, tokens, salt=salt)
        hits, evicted = o.add(rid, tokens, salt)
        want = hits * o.bs
        if got != want:
            prefix = o.show(o.key(salt, tokens, max(hits, 1) - 1))
            why = (
                f"the cached prefix {prefix} is a hit"
                if got < want
                else "no cached block holds a longer prefix of it (a hit is the same tokens from the start, same salt, "
                "whole blocks, leaving the last token to compute)"
            )
            pytest.fail(
                f"{call} returned {got} cached tokens, want {want}: {why}" + self.where(), pytrace=False
            )
        self.log[-1] += f"  -> {got}"
        self.check_table(rid, call, hits, evicted)
        return got

    def append(self, rid: int, tokens) -> None:
        call = f"append({rid}, {list(tokens)})"
        self.log.append(call)
        if not self.oracle.can_append(rid, tokens):
            before = self.counts()
            raises(self.kata.OutOfBlocksError, lambda: self.cache.append(rid, tokens), call + self.where())
            assert self.counts() == before, (
                f"{call} raised OutOfBlocksError but changed the pool: {before} -> {self.counts()}"
                + self.where()
            )
            self.log[-1] += "  -> OutOfBlocksError"
            return
        have = len(self.oracle.requests[rid]["keys"])
        self.cache.append(rid, tokens)
        evicted = self.oracle.append(rid, tokens)
        self.check_table(rid, call, have, evicted)

    def free(self, rid: int) -> None:
        self.log.append(f"free({rid})")
        self.cache.free(rid)
        self.oracle.free(rid)
        self.check_counts(f"free({rid})")

    def counts(self) -> tuple[int, int, int]:
        return (self.cache.num_free, self.cache.num_evictable, self.cache.num_cached)

    def check_table(self, rid: int, call: str, old: int, evicted: list) -> None:
        """Blocks [0, old) were the request's already (shared hits, or its own); the rest are new."""
        o = self.oracle
        req = o.requests[rid]
        table = self.cache.block_table(rid)
        assert isinstance(table, list) and len(table) == len(req["keys"]), (
            f"after {call}: block_table({rid}) is {table!r}, want {len(req['keys'])} blocks "
            f"({len(req['tokens'])} tokens in blocks of {o.bs})" + self.where()
        )
        for i in range(old):
            key = req["keys"][i]
            if key is not None and key in o.block_of and i < len(table) and table[i] != o.block_of[key]:
                pytest.fail(
                    f"after {call}: block {i} of request {rid} should be block {o.block_of[key]}, the cached block "
                    f"holding {o.show(key)}, but the table says {table[i]}" + self.where(),
                    pytrace=False,
                )
        in_use = {}
        for other in o.requests:
            if other != rid:
                for b in self.cache.block_table(other):
                    in_use[b] = other
        cached_elsewhere = {b: k for k, b in o.block_of.items() if k in o.users}
        for i in range(old, len(table)):
            b = table[i]
            if b in in_use:
                pytest.fail(
                    f"after {call}: new block {i} of request {rid} is block {b}, which request {in_use[b]} is "
                    "still using (a block in use is never handed out or evicted)" + self.where(),
                    pytrace=False,
                )
            if b in cached_elsewhere and cached_elsewhere[b] not in evicted:
                first = f"; the block to evict was the one holding {o.show(evicted[0])}" if evicted else ""
                pytest.fail(
                    f"after {call}: new block {i} of request {rid} is block {b}, which still holds the cached prefix "
                    f"{o.show(cached_elsewhere[b])}: it should not be evicted now"
                    + (first or ": a plain free block was there to take")
                    + " (plain free blocks go first, then the block evictable longest, a freed request's last block "
                    "first)" + self.where(),
                    pytrace=False,
                )
        for i, key in enumerate(req["keys"]):
            if key is not None and i >= old:
                o.block_of[key] = table[i]
        if len(set(table)) != len(table):
            pytest.fail(
                f"after {call}: block_table({rid}) = {table} holds a block twice" + self.where(),
                pytrace=False,
            )
        self.check_counts(call)

    def check_counts(self, call: str) -> None:
        o = self.oracle
        want = (o.num_free, len(o.since), len(o.users))
        assert self.counts() == want, (
            f"after {call}: (num_free, num_evictable, num_cached) is {self.counts()}, want {want} "
            "(num_free counts plain free blocks and evictable ones; num_cached every block holding a cached "
            "prefix, in use or not)" + self.where()
        )
        users: dict[int, int] = {}
        for rid in o.requests:
            for b in self.cache.block_table(rid):
                users[b] = users.get(b, 0) + 1
        for b in range(o.n):
            got = self.cache.refcount(b)
            if got != users.get(b, 0):
                pytest.fail(
                    f"after {call}: refcount({b}) is {got}, but {users.get(b, 0)} live requests' tables hold "
                    f"block {b}" + self.where(),
                    pytrace=False,
                )


# --------------------------------------------------------------------------- the README's examples


@pytest.mark.example
@pytest.mark.points(2)
def test_example_shared_system_prompt(kata):
    """README example: two requests with one 8-token system prompt share its 2 blocks"""
    c = Checked(kata, num_blocks=8, block_size=4)
    system = [1, 2, 3, 4, 5, 6, 7, 8]
    assert c.add(0, system + [9, 10]) == 0
    assert c.add(1, system + [11]) == 8
    assert c.cache.block_table(1)[:2] == c.cache.block_table(0)[:2], (
        "request 1 does not share request 0's blocks"
    )
    assert [c.cache.refcount(b) for b in c.cache.block_table(0)] == [2, 2, 1]


@pytest.mark.example
@pytest.mark.builds_on("test_example_shared_system_prompt")
def test_example_free_keeps_the_prefix(kata):
    """README example: a freed request's full blocks stay cached (evictable) and the next request hits them"""
    c = Checked(kata, num_blocks=4, block_size=4)
    c.add(0, [1, 2, 3, 4, 5, 6])
    c.free(0)
    assert (c.cache.num_free, c.cache.num_evictable, c.cache.num_cached) == (4, 1, 1)
    assert c.add(1, [1, 2, 3, 4, 7]) == 4


# --------------------------------------------------------------------------- the rules, one at a time


@pytest.mark.points(2)
def test_first_request_allocates_its_blocks(kata):
    """with nothing cached a prompt gets ceil(len / block_size) blocks of its own, each refcount 1"""
    rng = seeds.rng(1)
    for bs in (1, 3, 4):
        c = Checked(kata, num_blocks=12, block_size=bs)
        assert c.add(0, [rng.randrange(50) for _ in range(rng.randrange(1, 10))]) == 0


@pytest.mark.points(2)
@pytest.mark.builds_on("test_first_request_allocates_its_blocks")
def test_hits_are_whole_blocks_of_the_same_prefix(kata):
    """a hit is the longest run of whole blocks equal from the first token on; a partial block never hits"""
    rng = seeds.rng(2)
    for _ in range(6):
        bs = rng.randrange(2, 5)
        base = [rng.randrange(100) for _ in range(rng.randrange(bs, 4 * bs))]
        c = Checked(kata, num_blocks=40, block_size=bs)
        c.add(0, base)
        cut = rng.randrange(0, len(base) + 1)
        c.add(1, base[:cut] + [100 + rng.randrange(10) for _ in range(rng.randrange(1, 6))])


@pytest.mark.points(2)
@pytest.mark.builds_on("test_hits_are_whole_blocks_of_the_same_prefix")
def test_the_last_prompt_token_is_always_computed(kata):
    """a prompt that is all cached still computes its last token (its logits pick the first output)"""
    rng = seeds.rng(3)
    bs = rng.randrange(2, 5)
    prompt = [rng.randrange(100) for _ in range(3 * bs)]
    c = Checked(kata, num_blocks=10, block_size=bs)
    c.add(0, prompt)
    assert c.add(1, prompt) == 2 * bs
    assert c.add(2, prompt[: 2 * bs + 1]) == 2 * bs
    assert c.add(3, prompt[:bs]) == 0


@pytest.mark.points(2)
@pytest.mark.builds_on("test_hits_are_whole_blocks_of_the_same_prefix")
def test_a_block_is_its_whole_prefix(kata):
    """the same tokens in a block at another place, or after a different start, are not a hit"""
    rng = seeds.rng(4)
    bs = 3
    a, b = ([rng.randrange(100) for _ in range(bs)] for _ in range(2))
    c = Checked(kata, num_blocks=12, block_size=bs)
    c.add(0, a + b + [1])
    c.add(1, b + a + [1])  # the same blocks, swapped: no hit
    c.add(2, [a[0] + 1] + a[1:] + b + [1])  # block 1 equal, block 0 not: no hit


@pytest.mark.points(2)
@pytest.mark.builds_on("test_hits_are_whole_blocks_of_the_same_prefix")
def test_a_salt_keeps_tenants_apart(kata):
    """requests with different salts never share a block; the same salt shares as usual"""
    rng = seeds.rng(5)
    prompt = [rng.randrange(100) for _ in range(9)]
    c = Checked(kata, num_blocks=20, block_size=4)
    c.add(0, prompt, salt="alice")
    c.add(1, prompt, salt="bob")
    c.add(2, prompt)
    c.add(3, prompt, salt="alice")
    c.add(4, prompt, salt="")


@pytest.mark.points(2)
@pytest.mark.builds_on("test_first_request_allocates_its_blocks", "test_example_free_keeps_the_prefix")
def test_free_keeps_full_blocks_and_returns_partial_ones(kata):
    """a freed request's full blocks stay cached and count as free; its partial last block is plain"""
    rng = seeds.rng(6)
    bs = rng.randrange(2, 5)
    c = Checked(kata, num_blocks=10, block_size=bs)
    prompt = [rng.randrange(100) for _ in range(2 * bs + 1)]
    c.add(0, prompt)
    c.add(1, prompt[: 2 * bs] + [7])
    c.free(0)
    c.free(1)
    c.add(2, prompt[: 2 * bs] + [8, 9])


@pytest.mark.points(2)
@pytest.mark.builds_on("test_free_keeps_full_blocks_and_returns_partial_ones")
def test_append_caches_blocks_as_they_fill(kata):
    """generated tokens fill blocks too: the next turn of a chat, prompt + answer + more, hits them all"""
    rng = seeds.rng(7)
    bs = rng.randrange(2, 5)
    c = Checked(kata, num_blocks=20, block_size=bs)
    prompt = [rng.randrange(100) for _ in range(bs + 1)]
    answer = [rng.randrange(100) for _ in range(2 * bs)]
    c.add(0, prompt)
    for t in answer:
        c.append(0, [t])
    c.free(0)
    c.add(1, prompt + answer + [5, 6])


@pytest.mark.points(2)
@pytest.mark.builds_on("test_free_keeps_full_blocks_and_returns_partial_ones")
def test_evicts_only_when_no_plain_block_is_left(kata):
    """cached blocks are given up only when the pool has no plain free block; then the oldest goes first"""
    rng = seeds.rng(8)
    c = Checked(kata, num_blocks=6, block_size=2)
    first = [rng.randrange(100) for _ in range(4)]
    c.add(0, first + [1])  # 3 blocks, 2 cached
    c.free(0)
    c.add(1, [rng.randrange(100) + 100 for _ in range(5)])  # 3 blocks: plain ones, nothing evicted
    c.add(2, first + [2])  # still a hit


@pytest.mark.points(3)
@pytest.mark.builds_on("test_evicts_only_when_no_plain_block_is_left")
def test_eviction_order_is_least_recently_freed_tail_first(kata):
    """when blocks must be evicted: the one let go longest ago; of one request's blocks, its last first"""
    rng = seeds.rng(9)
    bs = 2
    c = Checked(kata, num_blocks=6, block_size=bs)
    old = [rng.randrange(100) for _ in range(2 * bs)]
    new = [rng.randrange(100) + 100 for _ in range(2 * bs)]
    c.add(0, old + [1])
    c.add(1, new + [1])
    c.free(0)  # old's two blocks evictable first, its tail before its head
    c.free(1)
    c.add(2, [200 + i for i in range(2 * bs + 1)])  # 3 blocks: 2 plain, then evicts old's tail
    c.add(3, old + [3])  # old's head still hits
    c.add(4, new + [4])


@pytest.mark.points(2)
@pytest.mark.builds_on("test_evicts_only_when_no_plain_block_is_left")
def test_a_block_in_use_is_never_evicted(kata):
    """with every block in use a new request is refused (OutOfBlocksError), and nothing changes"""
    rng = seeds.rng(10)
    c = Checked(kata, num_blocks=4, block_size=2)
    prompt = [rng.randrange(100) for _ in range(5)]
    c.add(0, prompt)
    msg = raises(
        kata.OutOfBlocksError, lambda: c.cache.add(1, [1, 2, 3]), "add(1, [1, 2, 3]) with 1 block free"
    )
    assert "2" in msg and "1" in msg, (
        f"OutOfBlocksError should name the 2 blocks needed and the 1 free: {msg!r}"
    )
    c.check_counts("the refused add")
    assert c.add(2, prompt[:4] + [9]) == 4  # sharing still works: 1 new block
    c.add(3, [5])  # no block left: refused
    c.append(0, [1])  # no block left: refused


@pytest.mark.points(2)
@pytest.mark.builds_on("test_a_block_in_use_is_never_evicted", "test_example_free_keeps_the_prefix")
def test_a_hit_on_an_evictable_block_is_not_free_too(kata):
    """sharing an evictable block takes it out of the free count, so it cannot also be handed out"""
    c = Checked(kata, num_blocks=3, block_size=2)
    c.add(0, [1, 2, 3])
    c.free(0)  # 1 evictable, 2 plain
    c.add(1, [1, 2, 3, 4, 5, 6])  # hits 1, needs 2 more: exactly the pool
    c.free(1)
    c.add(2, [1, 2, 3, 4, 5, 6, 7])  # hits 2 (evictable), needs 2: only 1 left besides them


@pytest.mark.points(2)
@pytest.mark.builds_on(
    "test_the_last_prompt_token_is_always_computed",
    "test_a_salt_keeps_tenants_apart",
    "test_example_free_keeps_the_prefix",
    "test_eviction_order_is_least_recently_freed_tail_first",
    "test_a_block_in_use_is_never_evicted",
)
def test_match_changes_nothing(kata):
    """match(tokens) says how many tokens a request would find cached, and changes no count or order"""
    rng = seeds.rng(11)
    c = Checked(kata, num_blocks=4, block_size=2)
    a = [rng.randrange(100) for _ in range(4)]
    c.add(0, a + [1])
    c.free(0)  # 2 plain, 2 evictable: a's tail, then its head
    for tokens, salt in ((a[:2] + [9], None), (a, None), (a + [2], "x"), (a + [2], None)):
        want = c.oracle.hits(tokens, salt) * 2
        got = c.cache.match(tokens, salt=salt)
        assert got == want, f"match({tokens}, salt={salt!r}) is {got}, want {want}" + c.where()
    c.check_counts("match")
    c.add(1, [50 + i for i in range(5)])  # 3 blocks: the 2 plain ones, then a's tail, as free() ordered
    c.add(2, a + [3])  # a's head still hits


@pytest.mark.points(3)
@pytest.mark.parametrize("stream", range(8))
@pytest.mark.builds_on(
    "test_eviction_order_is_least_recently_freed_tail_first",
    "test_append_caches_blocks_as_they_fill",
    "test_a_salt_keeps_tenants_apart",
    "test_a_hit_on_an_evictable_block_is_not_free_too",
    "test_a_block_is_its_whole_prefix",
    "test_the_last_prompt_token_is_always_computed",
)
def test_random_request_streams_match_the_oracle(kata, stream):
    """random streams of add / append / free over a small pool with few distinct prefixes: every hit, table,
    refcount, count and refusal as the brute-force oracle has it"""
    rng = seeds.rng(100 + stream)
    bs = rng.randrange(1, 5)
    c = Checked(kata, num_blocks=rng.randrange(4, 14), block_size=bs)
    systems = [[rng.randrange(6) for _ in range(rng.randrange(1, 3 * bs + 2))] for _ in range(3)]
    live, next_id = [], 0
    for _ in range(60):
        op = rng.random()
        if op < 0.45 or not live:
            prompt = rng.choice(systems) + [rng.randrange(6) for _ in range(rng.randrange(0, 2 * bs + 1))]
            if not prompt:
                prompt = [0]
            if c.add(next_id, prompt, salt=rng.choice([None, None, None, "t"])) >= 0:
                live.append(next_id)
            next_id += 1
        elif op < 0.75:
            c.append(rng.choice(live), [rng.randrange(6) for _ in range(rng.randrange(1, bs + 2))])
        else:
            rid = live.pop(rng.randrange(len(live)))
            c.free(rid)


# --------------------------------------------------------------------------- bad input


@pytest.mark.builds_on("test_first_request_allocates_its_blocks", "test_example_free_keeps_the_prefix")
def test_rejects_bad_input(kata):
    """bad sizes, ids, tokens and salts are ValueErrors naming the problem; the pool is unchanged"""
    for args in ((0, 4), (4, 0), (-1, 4), (2.5, 4), (True, 4)):
        raises(ValueError, lambda a=args: kata.PrefixCache(*a), f"PrefixCache{args}")
    cache = kata.PrefixCache(4, 2)
    cache.add(0, [1, 2, 3])
    raises(ValueError, lambda: cache.add(0, [4]), "add(0, ...) when request 0 exists")
    raises(ValueError, lambda: cache.add(1, []), "add(1, []): an empty prompt")
    raises(ValueError, lambda: cache.add(1, [1, -2]), "add(1, [1, -2]): a negative token id")
    raises(ValueError, lambda: cache.add(1, [1, 2.0]), "add(1, [1, 2.0]): a float token id")
    raises(ValueError, lambda: cache.add(1, [1], salt=3), "add(1, [1], salt=3): a salt that is not a str")
    raises(ValueError, lambda: cache.append(9, [1]), "append(9, ...) to an unknown request")
    raises(ValueError, lambda: cache.free(9), "free(9) of an unknown request")
    raises(ValueError, lambda: cache.block_table(9), "block_table(9) of an unknown request")
    raises(ValueError, lambda: cache.refcount(4), "refcount(4) in a pool of 4 blocks")
    cache.free(0)
    raises(ValueError, lambda: cache.free(0), "free(0) twice")
    got = (cache.num_free, cache.num_evictable, cache.num_cached)
    assert got == (4, 1, 1), (
        f"after the refused calls: (num_free, num_evictable, num_cached) {got}, want (4, 1, 1)"
    )
