"""QuickJS code execution for run_code: runner protocol and processes, TS erasure, marshaling."""
