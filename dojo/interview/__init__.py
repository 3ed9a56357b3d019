"""Assessment: mock interviews (session and scoring, the flow, the question bank, ask) and take-homes.

session (state, clock, scores), flow (`dojo interview`, `submit`, `history`, `stats`, and the rules
it sets for check/hint/watch/solution/status while a session is open: `during_session`), ask and
bank (the questions), takehome (`dojo grade`) and intake (its submissions read, checked and copied privately). May import: dojo.notebook (a take-home may be a
notebook), dojo.practice, dojo.grading and the base; never tools or cli.
"""
