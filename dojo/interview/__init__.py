"""Assessment: mock interviews (session and scoring, the flow, the question bank, ask) and take-homes.

session (state, clock, scores), flow (`dojo interview`, `submit`, `history`, `stats`, and the rules for
check/hint/watch/solution/status while a session is open), ask and answer (the questions at a terminal),
bank (the question bank, the interviewer's packet), takehome (`dojo grade`) and intake (its submissions).
May import: dojo.notebook, dojo.practice, dojo.grading and the base; never tools or cli.
"""
