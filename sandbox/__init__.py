"""QuickJS code execution for run_code: runner protocol and processes, TS erasure, marshaling.

The public API is re-exported here; nothing in this package but ``apps.py`` imports
Django.
"""

from sandbox.execution import (
    AbortSignal,
    CodeExecution,
    CodeExecutionLog,
    CodeExecutionResult,
    ExecutionError,
    configure_default_pool,
    default_pool,
    executions_watch,
    run_code,
)
from sandbox.marshal import UNDEFINED, JSMap, SerializationError, TypedArray
from sandbox.pool import RunnerPool

__all__ = [
    "UNDEFINED",
    "AbortSignal",
    "CodeExecution",
    "CodeExecutionLog",
    "CodeExecutionResult",
    "ExecutionError",
    "JSMap",
    "RunnerPool",
    "SerializationError",
    "TypedArray",
    "configure_default_pool",
    "default_pool",
    "executions_watch",
    "run_code",
]
