"""The AG-UI route (under ``/api/v1/``): see :mod:`interop.agui.views`."""

from interop.agui.views import urlpatterns

__all__ = ["urlpatterns"]
