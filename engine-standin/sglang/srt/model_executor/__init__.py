"""The simulated model runner: the start-up phases a scheduler logs."""
