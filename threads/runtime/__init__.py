"""The step engine: flows, steps, tools, stops; the per-thread lock and the inbox driver."""
