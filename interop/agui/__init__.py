"""AG-UI: an agent's turns as AG-UI runs, their events as an AG-UI event stream over SSE."""
