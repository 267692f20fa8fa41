"""What mlbench keeps between runs: the content-addressed artifact cache, canonical hashing, and
the append-only run history."""
