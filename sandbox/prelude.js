// Trusted set-up evaluated as a script in every fresh context before any guest code
// (compiled once per runner, loaded as bytecode). It captures the runner's host callable, builds the bridge (value codec, host-call
// proxies, console capture, export resolution) in closures, then removes everything that
// is not an ECMAScript intrinsic from globalThis and disables code generation from strings.
// The bridge (one dispatch function) is left in globalThis.__sandbox_bridge for the runner
// to take; hardening removes it before any guest code runs; synthetic
// modules reach their values through `import.meta.sandbox`, set by the runner's loader.
(() => {
  'use strict';
  const hostCall = globalThis.__sandbox_host_call;  // (callId, target, json) -> '' | message
  const { Object, Array, Map, Set, Date, JSON, Promise, String, Number, Error, TypeError,
          RangeError, ArrayBuffer, Uint8Array, Reflect } = globalThis;
  // Captured now: a guest that replaces intrinsics in its own context must not be able
  // to make the bridge misreport its result.
  const stringify = JSON.stringify, parse = JSON.parse;
  const { keys, freeze, isFrozen, defineProperty, getOwnPropertyDescriptor } = Object;
  const isArray = Array.isArray;
  const setOwn = (target, key, value) =>
    defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true });
  const mapArray = (array, fn) => {
    const out = new Array(array.length);
    for (let i = 0; i < array.length; i++) out[i] = fn(array[i], i);
    return out;
  };
  let input = null;  // set by the runner through bridge('init', json) before guest code
  const getPrototypeOf = Object.getPrototypeOf;
  const TypedArrayProto = getPrototypeOf(Uint8Array.prototype);
  const typedArrayTag = Object.getOwnPropertyDescriptor(TypedArrayProto, Symbol.toStringTag).get;

  class SerializationError extends Error {}
  Object.defineProperty(SerializationError.prototype, 'name', { value: 'SerializationError' });

  const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const B64_INDEX = new Map(Array.from(B64, (c, i) => [c, i]));
  function toBase64(bytes) {
    let out = '';
    for (let i = 0; i < bytes.length; i += 3) {
      const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
      out += B64[(n >> 18) & 63] + B64[(n >> 12) & 63] +
        (i + 1 < bytes.length ? B64[(n >> 6) & 63] : '=') + (i + 2 < bytes.length ? B64[n & 63] : '=');
    }
    return out;
  }
  function fromBase64(text) {
    const clean = text.replace(/=+$/, '');
    const bytes = new Uint8Array(Math.floor(clean.length * 3 / 4));
    let bits = 0, value = 0, j = 0;
    for (const c of clean) {
      value = (value << 6) | B64_INDEX.get(c); bits += 6;
      if (bits >= 8) { bits -= 8; bytes[j++] = (value >> bits) & 255; }
    }
    return bytes;
  }

  const member = (path, key) => /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;

  // Guest value -> tagged JSON node (see sandbox/marshal.py for the format). Plain loops,
  // not mapArray: one stack frame per level of nesting, so MAX_VALUE_DEPTH is met before
  // the stack limit is.
  function encode(value, path, seen, depth = 0) {
    switch (typeof value) {
      case 'undefined': return { $: 'undefined' };
      case 'boolean': return value;
      case 'string': return value;
      case 'bigint': return { $: 'bigint', v: value.toString() };
      case 'number':
        if (Number.isNaN(value)) return { $: 'number', v: 'NaN' };
        if (value === Infinity) return { $: 'number', v: 'Infinity' };
        if (value === -Infinity) return { $: 'number', v: '-Infinity' };
        if (value === 0 && 1 / value < 0) return { $: 'number', v: '-0' };
        return value;
      case 'symbol': throw new SerializationError(`${path}: a symbol is not transferable`);
      case 'function': throw new SerializationError(`${path}: a function is not transferable`);
    }
    if (value === null) return null;
    if (seen.has(value)) throw new SerializationError(`${path}: cyclic structure is not transferable`);
    if (depth >= input.max_value_depth) {
      const shown = path.length <= 100 ? path : `${path.slice(0, 60)}...${path.slice(-30)}`;
      throw new SerializationError(`${shown}: nested deeper than ${input.max_value_depth} levels (MAX_VALUE_DEPTH), which cannot cross`);
    }
    depth++;
    seen.add(value);
    try {
      if (isArray(value)) {
        if (getPrototypeOf(value) !== Array.prototype) throw new SerializationError(`${path}: an Array subclass is not transferable`);
        const out = new Array(value.length);
        for (let i = 0; i < value.length; i++) out[i] = encode(value[i], `${path}[${i}]`, seen, depth);
        return out;
      }
      if (value instanceof Date) return { $: 'date', v: value.getTime() };
      if (value instanceof Map) {
        let i = 0; const out = [];
        for (const [k, v] of value) { out[i] = [encode(k, `${path}<key ${i}>`, seen, depth), encode(v, `${path}<value ${i}>`, seen, depth)]; i++; }
        return { $: 'map', v: out };
      }
      if (value instanceof Set) {
        let i = 0; const out = [];
        for (const v of value) { out[i] = encode(v, `${path}<item ${i}>`, seen, depth); i++; }
        return { $: 'set', v: out };
      }
      if (value instanceof ArrayBuffer) return { $: 'bytes', k: 'ArrayBuffer', v: toBase64(new Uint8Array(value)) };
      const tag = typedArrayTag.call(value);
      if (tag !== undefined) {
        return { $: 'bytes', k: tag, v: toBase64(new Uint8Array(value.buffer, value.byteOffset, value.byteLength)) };
      }
      const proto = getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        const name = proto && proto.constructor && typeof proto.constructor.name === 'string' ? proto.constructor.name : 'object';
        throw new SerializationError(`${path}: a ${name || 'class'} instance is not transferable`);
      }
      const out = {};  // setOwn: a '__proto__' key stays an ordinary own property
      for (const key of keys(value)) setOwn(out, key, encode(value[key], member(path, key), seen, depth));
      return { $: 'object', v: out };
    } finally {
      seen.delete(value);
    }
  }
  const encodeJSON = (value, path, depth = 0) => stringify(encode(value, path, new Set(), depth));

  // Tagged JSON node -> fresh guest value (a structured clone: nothing is shared).
  function decode(node) {
    if (node === null || typeof node !== 'object') return node;
    if (isArray(node)) {
      const out = new Array(node.length);
      for (let i = 0; i < node.length; i++) out[i] = decode(node[i]);
      return out;
    }
    switch (node.$) {
      case 'object': { const out = {}; for (const key of keys(node.v)) setOwn(out, key, decode(node.v[key])); return out; }
      case 'undefined': return undefined;
      case 'number': return { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity, '-0': -0 }[node.v];
      case 'bigint': return BigInt(node.v);
      case 'date': return new Date(node.v);
      case 'map': { const out = new Map(), pairs = node.v; for (let i = 0; i < pairs.length; i++) out.set(decode(pairs[i][0]), decode(pairs[i][1])); return out; }
      case 'set': { const out = new Set(), items = node.v; for (let i = 0; i < items.length; i++) out.add(decode(items[i])); return out; }
      case 'bytes': {
        const bytes = fromBase64(node.v);
        if (node.k === 'ArrayBuffer') return bytes.buffer;
        const Kind = globalThis[node.k];
        return new Kind(bytes.buffer, 0, bytes.byteLength / Kind.BYTES_PER_ELEMENT);
      }
      case 'function': return hostFunction(node.id);
    }
    throw new TypeError(`malformed value tag ${node.$}`);
  }
  function deepFreeze(value) {
    if (value !== null && (typeof value === 'object' || typeof value === 'function') && !Object.isFrozen(value)) {
      Object.freeze(value);
      for (const key of Reflect.ownKeys(value)) {
        const d = Object.getOwnPropertyDescriptor(value, key);
        if ('value' in d) deepFreeze(d.value);
      }
      if (value instanceof Map) for (const [k, v] of value) { deepFreeze(k); deepFreeze(v); }
      if (value instanceof Set) for (const v of value) deepFreeze(v);
    }
    return value;
  }

  const pending = new Map();  // callId -> {resolve, reject}
  let nextCall = 0;
  function callHost(target, args, label) {
    let payload;
    // The argument list is an envelope, not a level: each argument may nest MAX_VALUE_DEPTH deep.
    try { payload = encodeJSON(args, `${label}(arguments)`, -1); } catch (e) { return Promise.reject(e); }
    if (payload.length > input.max_host_call_bytes) {
      return Promise.reject(new RangeError(`${label}(arguments): ${payload.length} bytes, over MAX_HOST_CALL_BYTES=${input.max_host_call_bytes}`));
    }
    if (pending.size >= input.max_pending_host_calls) {
      return Promise.reject(new RangeError(`${label}: ${pending.size} host calls already pending (MAX_PENDING_HOST_CALLS=${input.max_pending_host_calls})`));
    }
    const callId = String(++nextCall);
    const promise = new Promise((resolve, reject) => pending.set(callId, { resolve, reject }));
    const refused = hostCall(callId, target, payload);
    if (refused) { pending.delete(callId); return Promise.reject(new Error(refused)); }
    return promise;
  }
  function hostFunction(id) {
    const label = id.slice(id.indexOf(':') + 1);
    // An arrow: no own `this`, no prototype; only the explicit arguments reach the host.
    const proxy = (...args) => callHost(id, args, label);
    Object.defineProperty(proxy, 'name', { value: label.replace(/^.*[.\]]/, '') || 'host' });
    return Object.freeze(proxy);
  }

  // console: captured with level and timestamp, capped by entry count and encoded size.
  const logs = [];
  let logBytes = 0, dropped = 0;
  function logArg(value, i) {
    try { return encode(value, `console argument ${i}`, new Set()); }
    catch (e) { try { return String(value); } catch (_) { return '[unprintable]'; } }
  }
  function capture(level) {
    return (...args) => {
      if (logs.length >= input.max_log_entries) { dropped++; return; }
      const encoded = mapArray(args, logArg);
      const size = stringify(encoded).length;
      if (logBytes + size > input.max_log_bytes) { dropped++; return; }
      logBytes += size;
      logs[logs.length] = { level, args: encoded, timestamp: Date.now() };
    };
  }
  const console = Object.freeze({
    log: capture('log'), info: capture('info'), warn: capture('warn'),
    error: capture('error'), debug: capture('debug'), trace: capture('debug'),
  });
  const report = (value) => { callHost('report', [value], 'report').catch(() => {}); };

  const namespaces = new Map();
  function namespace(specifier) {
    if (!namespaces.has(specifier)) {
      let value;
      if (specifier === 'sandbox:globals') {
        value = { console };
        if (input.report) value.report = report;
        for (const name of Object.keys(input.globals)) value[name] = decode(input.globals[name]);
      } else {
        value = decode(input.imports[specifier]);
      }
      namespaces.set(specifier, deepFreeze(value));
    }
    return namespaces.get(specifier);
  }
  globalThis.__sandbox_modules = Object.freeze({ namespace });

  function describe(error) {
    if (error !== null && typeof error === 'object') {
      let name = 'Error', message = '', stack;
      try { name = String(error.name ?? 'Error'); } catch (_) {}
      try { message = String(error.message ?? ''); } catch (_) {}
      try { if (typeof error.stack === 'string') stack = error.stack; } catch (_) {}
      return { name, message, stack };
    }
    let message;
    try { message = String(error); } catch (_) { message = '[unprintable thrown value]'; }
    return { name: 'Error', message, thrown: true };
  }

  let outcome = null;
  const thenable = (v) => v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';
  async function resolveExport(ns) {
    // Spec 13.5: read the export, call it when it is a function, await thenables.
    if (!(input.fn in ns)) {
      return { status: 'link_error', error: { name: 'LinkError', message: `the module has no export named '${input.fn}'` } };
    }
    let candidate = ns[input.fn];
    if (typeof candidate === 'function') {
      candidate = candidate(...mapArray(input.args, decode));
    } else if (input.has_args) {
      return { status: 'error', error: { name: 'TypeError', message: `export '${input.fn}' is not a function but execute.args were given` } };
    }
    while (thenable(candidate)) candidate = await candidate;
    const result = encodeJSON(candidate, 'result');
    if (result.length > input.max_result_bytes) {
      throw new SerializationError(`result: ${result.length} bytes, over MAX_RESULT_BYTES=${input.max_result_bytes}`);
    }
    return { status: 'success', result };
  }

  // The global object's properties in ECMA-262 (2025) section 19: value properties,
  // function properties, constructors and other properties, and nothing else (spec 13.1:
  // "only ECMAScript intrinsics"). Left out of that list on purpose: eval and Function
  // (code generation from strings), SharedArrayBuffer and Atomics, all four refused by
  // spec 13.1. Everything QuickJS adds is removed: InternalError, Annex B's escape and
  // unescape (optional outside web browsers), the resource-management proposal's
  // SuppressedError, DisposableStack and AsyncDisposableStack (not in ECMA-262 2025),
  // the host's queueMicrotask, performance, atob, btoa, DOMException, and the bridge.
  const STANDARD_GLOBALS = new Set([
    'globalThis', 'Infinity', 'NaN', 'undefined',
    'isFinite', 'isNaN', 'parseFloat', 'parseInt',
    'decodeURI', 'decodeURIComponent', 'encodeURI', 'encodeURIComponent',
    'AggregateError', 'Array', 'ArrayBuffer', 'BigInt', 'BigInt64Array', 'BigUint64Array',
    'Boolean', 'DataView', 'Date', 'Error', 'EvalError', 'FinalizationRegistry',
    'Float16Array', 'Float32Array', 'Float64Array', 'Int8Array', 'Int16Array', 'Int32Array',
    'Iterator', 'Map', 'Number', 'Object', 'Promise', 'Proxy', 'RangeError', 'ReferenceError',
    'RegExp', 'Set', 'String', 'Symbol', 'SyntaxError', 'TypeError', 'Uint8Array',
    'Uint8ClampedArray', 'Uint16Array', 'Uint32Array', 'URIError', 'WeakMap', 'WeakRef',
    'WeakSet',
    'JSON', 'Math', 'Reflect',
  ]);

  const bridge = {
    start(main) {
      import(main).then(resolveExport).then(
        (value) => { outcome = value; },
        (error) => { outcome = { status: 'error', error: describe(error) }; },
      );
    },
    outcome() { return outcome === null ? '' : stringify(outcome); },
    pendingCalls() { return pending.size; },
    settle(callId, ok, json) {
      const waiter = pending.get(callId);
      if (waiter === undefined) return;
      pending.delete(callId);
      const body = parse(json);
      if (ok) { waiter.resolve(decode(body)); return; }
      const error = new Error(String(body.message ?? 'host function failed'));
      if (body.name) Object.defineProperty(error, 'name', { value: String(body.name), configurable: true, writable: true });
      waiter.reject(error);
    },
    logs() {
      const out = mapArray(logs, (entry) => entry);
      if (dropped > 0) {
        out[out.length] = ({ level: 'warn', timestamp: Date.now(), args: [
          `${dropped} console entries dropped (caps MAX_LOG_ENTRIES=${input.max_log_entries}, MAX_LOG_BYTES=${input.max_log_bytes})`] });
      }
      return stringify(out);
    },
    init(json) { input = parse(json); },
    harden() {
      // Every constructor of functions from source text, reachable as `.constructor` of
      // any function, is replaced by a thrower that can be neither written nor redefined.
      const refuse = function () { throw new EvalError('code generation from strings is disabled in the sandbox'); };
      Object.freeze(refuse);
      const prototypes = [getPrototypeOf(function () {}), getPrototypeOf(async function () {}),
        getPrototypeOf(function* () {}), getPrototypeOf(async function* () {})];
      for (const p of prototypes) {
        Object.defineProperty(p, 'constructor', { value: refuse, writable: false, configurable: false, enumerable: false });
      }
      for (const key of Reflect.ownKeys(globalThis)) {
        if (!STANDARD_GLOBALS.has(key)) delete globalThis[key];
      }
    },
  };
  // The runner's binding can call functions but not read properties: one entry point.
  return (op, a, b, c) => bridge[op](a, b, c);
})()
