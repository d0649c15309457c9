"""Thread services: writes and reads, one module per area (threads, messages, files, ...)."""
