"""ASGI entry point: HTTP through Django (its request bodies under a read timeout),
WebSockets through Channels.

Serve with ``uvicorn config.asgi:application``.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")  # noqa: TID251
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from common.body_timeout import BodyTimeout  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402
from tenancy.authentication import BrowserOriginValidator, TenantAuthMiddlewareStack  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodyTimeout(django_asgi_app),
        "websocket": BrowserOriginValidator(
            TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
