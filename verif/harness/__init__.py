"""The cocotb harness: runner, cycler, stream and credit agents, scoreboard, stimulus."""
