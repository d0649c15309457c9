from django.apps import AppConfig


class RegistryDemoAppConfig(AppConfig):
    name = "tests.agents.registry.demo_app"
    label = "registry_demo_app"
