"""IR buffers -> ordered kernel groups and extern calls: `dependencies` (MemoryDep),
`fusion` (legality, scoring, greedy fusion), `scheduler` (the Scheduler)."""
