"""The runner's own tests. The toy kata under toy/ is graded by them, never collected directly."""

collect_ignore = ["toy"]
