"""Thread runtime: storage, ThreadState, the step engine, tasks, consumers and the thread API."""
