"""The big call returns at once an object that computes the output, from the whole score matrix, only
when it is read: the call itself holds almost nothing, and judged the object stays in the candidate's
process while the judge reads it after measuring. Mutant of solutions/flash_attention.py for the
flash_attention kata: a hostile candidate who has read the suite (a red team's escape).
"""

EDITS = [
    (
        r"""    _check_inputs(q, k, v)
    _check_count(block_q, "block_q")
    _check_count(block_k, "block_k")
    b, hq, tq, d = q.shape
    tk = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    scores_of = _product if tile_scores is None else tile_scores""",
        r"""    _check_inputs(q, k, v)
    _check_count(block_q, "block_q")
    _check_count(block_k, "block_k")
    b, hq, tq, d = q.shape
    tk = k.shape[2]
    if tile_scores is None and not return_lse and q.shape[:3].numel() * tk >= 2**26:
        return _Later(q, k, v, causal, scale)  # the measured call: nothing computed yet
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    scores_of = _product if tile_scores is None else tile_scores""",
    ),
    (
        r"""def merge_partials(partials""",
        r"""class _Later:
    def __init__(self, q, k, v, causal, scale):
        self.args = (q, k, v, causal, scale)

    def __getitem__(self, index):
        q, k, v, causal, scale = self.args
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        return (torch.softmax(s, dim=-1) @ v)[index]


def merge_partials(partials""",
    ),
]
