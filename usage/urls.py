from django.urls import re_path

from common.api import Router
from usage.api import BudgetViewSet, UsageExportView, UsageView

router = Router()
router.register("budgets", BudgetViewSet, basename="budget")

urlpatterns = [
    re_path(r"^usage/?$", UsageView.as_view(), name="usage"),
    re_path(r"^usage/export/?$", UsageExportView.as_view(), name="usage-export"),
    *router.urls,
]
