"""Plans prefill chunks before the decodes: a long prompt takes the whole budget and the running requests stall.

Mutant of solutions/scheduler.py for the scheduler suite.
"""

EDITS = [
    (
        """        for request in list(self._running):  # pass 1: decodes, oldest first
            if budget == 0:
                break""",
        """        prefill_first = [r for r in self._running if not r.decoding] + list(self._waiting)
        for request in prefill_first:
            room = (request.blocks + self._free) * self.config.block_size - request.computed
            n = min(len(request.tokens) - request.computed, budget, room)
            if n <= 0:
                break
            if request in self._waiting:
                self._waiting.remove(request)
                self._running.append(request)
            end = request.computed + n
            self._take(request, self._blocks_for(end))
            early.append(Chunk(request.id, request.computed, tuple(request.tokens[request.computed:end]),
                               end == len(request.tokens)))
            budget -= n
        for request in list(self._running):  # pass 1: decodes, oldest first
            if budget == 0:
                break
            if any(c.request_id == request.id for c in early):
                continue""",
    ),
    (
        """        budget = self.config.max_tokens_per_step
        decodes: list[Chunk] = []""",
        """        budget = self.config.max_tokens_per_step
        early: list[Chunk] = []
        decodes: list[Chunk] = []""",
    ),
    (
        """        candidates = [r for r in self._running if not r.decoding] + ([] if preempted else list(self._waiting))""",
        """        candidates = []  # the prefills went first""",
    ),
    (
        """        self._plan = StepPlan(prefills, decodes, preempted)""",
        """        self._plan = StepPlan(early + prefills, decodes, preempted)""",
    ),
]
