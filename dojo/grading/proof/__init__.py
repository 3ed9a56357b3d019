"""The suite proof: every kata's suite passes the reference and fails the stub and each mutant."""
