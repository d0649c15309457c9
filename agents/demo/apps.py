from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "agents.demo"
    label = "agents_demo"
    verbose_name = "Demo agents"
