"""The parts of the QuickJS C API the ``quickjs`` binding does not expose, through ctypes.

The binding (quickjs-ng 0.17.0.2, pinned exactly) gives contexts, eval, host callables and
the job queue, but no module loader, no interrupt handler and no access to a module's
``import.meta``. Its shared library exports the whole ``JS_*`` API, and its ``Context``
object starts with ``PyObject_HEAD`` followed by the ``JSRuntime*`` and the
``JSContext*``. ``context_pointers`` reads them and refuses to go on unless the engine
agrees that the context belongs to the runtime, so a changed layout fails closed
instead of corrupting memory.
"""

from __future__ import annotations

import ctypes
from ctypes import CFUNCTYPE, c_char_p, c_int, c_int64, c_size_t, c_uint64, c_void_p
from typing import Any, Final

import _quickjs
import quickjs


class JSValue(ctypes.Structure):
    """``JSValue`` on 64-bit builds without NaN-boxing: a union and a tag."""

    _fields_ = [("u", c_uint64), ("tag", c_int64)]


TAG_EXCEPTION: Final = 6
EVAL_MODULE: Final = 1
EVAL_COMPILE_ONLY: Final = 1 << 5
OBJ_BYTECODE: Final = 1

# A warning: ``lib`` is a ctypes.CDLL, which releases the GIL around every call. The
# binding's host callables expect the GIL to have been released by the binding itself
# and abort the interpreter otherwise, so no call made here may run guest code that can
# reach a host callable. Guest code runs only through the binding (eval, module,
# execute_pending_job, calling a function object).

lib = ctypes.CDLL(_quickjs.__file__)
lib.JS_GetRuntime.restype = c_void_p
lib.JS_GetRuntime.argtypes = [c_void_p]
lib.JS_Eval.restype = JSValue
lib.JS_Eval.argtypes = [c_void_p, c_char_p, c_size_t, c_char_p, c_int]
lib.JS_FreeValue.restype = None
lib.JS_FreeValue.argtypes = [c_void_p, JSValue]
lib.JS_DupValue.restype = JSValue
lib.JS_DupValue.argtypes = [c_void_p, JSValue]
lib.JS_ResolveModule.restype = c_int
lib.JS_ResolveModule.argtypes = [c_void_p, JSValue]
lib.JS_EvalFunction.restype = JSValue
lib.JS_EvalFunction.argtypes = [c_void_p, JSValue]
lib.JS_GetImportMeta.restype = JSValue
lib.JS_GetImportMeta.argtypes = [c_void_p, c_void_p]
lib.JS_NewStringLen.restype = JSValue
lib.JS_NewStringLen.argtypes = [c_void_p, c_char_p, c_size_t]
lib.JS_SetPropertyStr.restype = c_int
lib.JS_SetPropertyStr.argtypes = [c_void_p, JSValue, c_char_p, JSValue]
lib.JS_GetPropertyStr.restype = JSValue
lib.JS_GetPropertyStr.argtypes = [c_void_p, JSValue, c_char_p]
lib.JS_GetGlobalObject.restype = JSValue
lib.JS_GetGlobalObject.argtypes = [c_void_p]
lib.JS_GetException.restype = JSValue
lib.JS_GetException.argtypes = [c_void_p]
lib.JS_ThrowReferenceError.restype = JSValue  # variadic: argtypes stay unset
lib.js_strdup.restype = c_void_p
lib.js_strdup.argtypes = [c_void_p, c_char_p]
lib.JS_SetModuleLoaderFunc.restype = None
lib.JS_SetModuleLoaderFunc.argtypes = [c_void_p, c_void_p, c_void_p, c_void_p]
lib.JS_WriteObject.restype = c_void_p
lib.JS_WriteObject.argtypes = [c_void_p, ctypes.POINTER(c_size_t), JSValue, c_int]
lib.JS_ReadObject.restype = JSValue
lib.JS_ReadObject.argtypes = [c_void_p, c_char_p, c_size_t, c_int]
lib.js_free.restype = None
lib.js_free.argtypes = [c_void_p, c_void_p]
lib.JS_SetInterruptHandler.restype = None
lib.JS_SetInterruptHandler.argtypes = [c_void_p, c_void_p, c_void_p]

# char *normalize(JSContext *ctx, const char *base, const char *name, void *opaque)
NORMALIZE_T = CFUNCTYPE(c_void_p, c_void_p, c_char_p, c_char_p, c_void_p)
# JSModuleDef *load(JSContext *ctx, const char *name, void *opaque)
LOAD_T = CFUNCTYPE(c_void_p, c_void_p, c_char_p, c_void_p)
# int interrupt(JSRuntime *rt, void *opaque): non-zero stops the running code
INTERRUPT_T = CFUNCTYPE(c_int, c_void_p, c_void_p)


class LayoutError(RuntimeError):
    """The binding's object layout is not the one this module was written for."""


def context_pointers(context: quickjs.Context) -> tuple[int, int]:
    """``(JSRuntime*, JSContext*)`` of a binding context, verified by the engine itself."""
    runtime = c_void_p.from_address(id(context) + 16).value
    js_context = c_void_p.from_address(id(context) + 24).value
    if not runtime or not js_context or lib.JS_GetRuntime(js_context) != runtime:
        raise LayoutError("quickjs Context layout changed: refusing to run guest code")
    return runtime, js_context


def function_pointer(callback: Any) -> c_void_p:
    """A ctypes callback as the ``void*`` the QuickJS setters take."""
    return ctypes.cast(callback, c_void_p)


def throw_reference_error(js_context: int, message: str) -> None:
    # The format is fixed: a guest-chosen specifier must never be read as a format string.
    lib.JS_ThrowReferenceError(c_void_p(js_context), b"%s", message.encode("utf-8", "replace"))


def new_string(js_context: int, text: str) -> JSValue:
    data = text.encode("utf-8", "replace")
    value: JSValue = lib.JS_NewStringLen(js_context, data, len(data))
    return value


def compile_script_bytecode(source: str, filename: str) -> bytes:
    """Bytecode of a global script, compiled in a throwaway context."""
    context = quickjs.Context()
    _, js_context = context_pointers(context)
    data = source.encode("utf-8")
    function = lib.JS_Eval(js_context, data, len(data), filename.encode(), EVAL_COMPILE_ONLY)
    if function.tag == TAG_EXCEPTION:
        raise RuntimeError(f"{filename} does not compile")
    size = c_size_t()
    buffer = lib.JS_WriteObject(js_context, ctypes.byref(size), function, OBJ_BYTECODE)
    try:
        return ctypes.string_at(buffer, size.value)
    finally:
        lib.js_free(js_context, buffer)
        lib.JS_FreeValue(js_context, function)


def run_script_bytecode(js_context: int, bytecode: bytes) -> bool:
    """Evaluate bytecode from ``compile_script_bytecode``; False if it threw.

    The script must not call host callables while it runs (see the warning above).
    """
    function = lib.JS_ReadObject(js_context, bytecode, len(bytecode), OBJ_BYTECODE)
    if function.tag == TAG_EXCEPTION:
        return False
    result = lib.JS_EvalFunction(js_context, function)  # consumes `function`
    if result.tag == TAG_EXCEPTION:
        return False
    lib.JS_FreeValue(js_context, result)
    return True
