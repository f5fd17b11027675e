//! Small `unsafe` islands over the CPython C-API: what PyO3 has no safe wrapper for, or
//! wraps at a cost the hot path cannot pay (contexts and vectorcall, `METH_FASTCALL`
//! methods, a native `tp_iternext`, buffer exports, an instance's own attributes, the GIL-guarded cell, a handle's
//! allocation).
//! Owns: those calls and the invariants that make them sound. Not: deciding what to do
//! with a result (callers), raw OS calls (`sys/`, which this module may call; `sys/` never
//! imports this one).
//!
//! SAFETY discipline: every `unsafe` block carries a `// SAFETY:` line that names
//! - the token that proves the GIL is held (a `Python<'_>` or a `Bound` in scope, or the
//!   interpreter calling a slot, which it does only attached);
//! - for each raw `PyObject` pointer, whose reference it is (borrowed, for how long, or a
//!   new one handed to `Bound::from_owned_ptr*`) and why it is not NULL or an error is set;
//! - for a buffer export, that it stays held (and unchanged in size) for the whole use.
//!
//! A panic never crosses into the interpreter: the raw entry points catch it and raise
//! `PanicException`, as PyO3 does.

pub mod alloc;
pub mod attrs;
pub mod buffer;
pub mod fastcall;
pub mod gil;
pub mod iternext;
pub mod python;
