"""The thread REST API, one module per area; threads/urls.py mounts them."""
