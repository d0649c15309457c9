"""A2A 1.0 server (JSON-RPC binding): each agent of a tenant as an A2A agent, its card at a
tenant-scoped well-known path; A2A contexts are our threads, A2A tasks our turns."""
