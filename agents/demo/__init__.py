"""The demo tenant's agents: two function tools and a bundle (development only)."""
