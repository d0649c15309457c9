"""The web console: server-rendered pages where a tenant's people follow and drive threads."""
