"""The console's pages, one module per area; each module's ``urlpatterns`` are mounted
under ``/console/`` by :mod:`console.urls`."""
