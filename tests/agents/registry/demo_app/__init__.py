"""A real installed app for discovery tests: its ``agent_tools`` registers one of each kind."""
