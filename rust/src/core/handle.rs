//! `LoopHandle`: the transports' way into their loop, as tokio's runtime `Handle` is its
//! resources' way into the driver (not an asyncio `Handle`: those are `handles/`).
//! Owns: the handle (the loop's core and its Python object), how a Python loop object leads
//! to one, and the entry points the bindings and the transports share: a new callback
//! handle (context, debug stack, freelist), fd watchers by number, stopping a receive.
//! Not: the `Loop` class (`py/loop_.rs`, which hands the way from its objects to their
//! cores down at module start, `set_core_of`), argument checks on Python values (`py/`).

use std::sync::{Arc, OnceLock};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyInt;

use super::streams::{FlushHook, SentHook};
use super::watchers::{Removed, Side};
use super::LoopCore;
use crate::errors::os_error;
use crate::ffi::python::{context_is_empty, copy_context, current_context_is_empty, gc_track};
use crate::handles::{Args, Handle};

/// A loop object's core, or `None` for an object that is not a native loop.
pub type CoreOf = for<'py> fn(&Bound<'py, PyAny>) -> Option<Arc<LoopCore>>;

/// Set once by the bindings (`py::register`), which own the loop class: the transports
/// are made from Python with the loop object and know no class above them.
static CORE_OF: OnceLock<CoreOf> = OnceLock::new();

/// Tells [`LoopHandle::of`] how to find a loop object's core (a second call is ignored).
pub fn set_core_of(f: CoreOf) {
    let _ = CORE_OF.set(f);
}

static FORMAT: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// `rsloop._format`: the Python helpers used on slow paths (debug checks, formatting).
pub fn format_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    FORMAT
        .get_or_try_init(py, || py.import("rsloop._format").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// A new handle's context (`None`: run in a new empty one) and creation stack.
type HandleParts = (Option<Py<PyAny>>, Option<Py<PyAny>>);

/// What a transport holds of its loop: the core, and the Python loop object (kept alive as
/// before, shown to the collector by the transport, and called for what Python does:
/// `create_future`).
pub struct LoopHandle {
    core: Arc<LoopCore>,
    obj: Py<PyAny>,
}

// Only the Unix transports use a handle (absent on Windows).
#[cfg_attr(not(unix), allow(dead_code))]
impl LoopHandle {
    /// The handle of the native loop `obj` (a `TypeError` for anything else, as the
    /// constructors' argument check gave before).
    pub fn of(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let core = CORE_OF.get().and_then(|f| f(obj)).ok_or_else(|| {
            let name = obj
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into());
            PyTypeError::new_err(format!("'{name}' object is not an instance of 'Loop'"))
        })?;
        Ok(LoopHandle {
            core,
            obj: obj.clone().unbind(),
        })
    }

    /// The Python loop object.
    pub fn obj(&self) -> &Py<PyAny> {
        &self.obj
    }

    /// `call_soon(callback, *args, context=context)` for the transports: no debug checks
    /// on the callback, which is the transport's own.
    pub fn call_soon(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let core = &self.core;
        core.check_closed()?;
        let handle = core.make_handle(py, callback, args, context, core.debug())?;
        core.push_ready(py, handle);
        Ok(())
    }

    /// `add_reader(fd, callback, *args)` / `add_writer` for the transports; the callback
    /// runs in `context` (3.15's transport context), or in a copy of the current one.
    pub fn add_watcher(
        &self,
        py: Python<'_>,
        fd: i32,
        side: Side,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let fileobj = PyInt::new(py, fd).into_any().unbind();
        self.core
            .add_watcher_as(py, fileobj, fd, side, callback, args, false, context)
    }

    /// A TCP transport's reader on `fd`, armed once for every readiness (see
    /// `core/watchers.rs`): the callback must call [`read_again`](Self::read_again) after a
    /// read that may have left data in the socket.
    pub fn add_stream_reader(
        &self,
        py: Python<'_>,
        fd: i32,
        callback: Py<PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let fileobj = PyInt::new(py, fd).into_any().unbind();
        self.core
            .add_watcher_as(
                py,
                fileobj,
                fd,
                Side::Read,
                callback,
                Args::Zero,
                true,
                context,
            )
            .map(drop)
    }

    /// The stream reader on `fd` read all it asked for: the socket may hold more, so its
    /// callback runs in the next iteration, as a selector would report the fd again.
    pub fn read_again(&self, py: Python<'_>, fd: i32) {
        self.core
            .queues
            .with(py, |q| q.watchers.again(fd, Side::Read));
    }

    /// `remove_reader(fd)` / `remove_writer`.
    pub fn remove_watcher(&self, py: Python<'_>, fd: i32, side: Side) -> PyResult<bool> {
        if self.core.closed() {
            return Ok(false);
        }
        self.core.remove_watcher_fd(py, fd, side)
    }

    /// A transport wrote: call `flush(owner)` just before the next wait.
    pub fn mark_dirty(&self, py: Python<'_>, owner: Py<PyAny>, flush: FlushHook) {
        self.core
            .queues
            .with(py, |q| q.streams.mark_dirty(owner, flush));
    }

    /// Queues a send of the `msghdr` at `msg` (see `Op::SendMsg`); `sent(owner, result)`.
    pub fn send_submit(
        &self,
        py: Python<'_>,
        fd: i32,
        msg: usize,
        owner: Py<PyAny>,
        sent: SentHook,
    ) -> u64 {
        self.core
            .queues
            .with(py, |q| q.streams.send(fd, msg, owner, sent))
    }

    /// Cancels a send in flight (abort); its completion still comes.
    pub fn send_cancel(&self, py: Python<'_>, token: u64) -> PyResult<()> {
        self.core.queues.with(py, |q| q.streams.cancel_send(token));
        self.core.submit_cancels(py).map_err(|e| os_error(&e))
    }
}

// The entry points the bindings (`py/`) and the transports (through `LoopHandle`) share.
impl LoopCore {
    /// asyncio's `_closed`.
    pub fn closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// asyncio's `_check_closed`.
    pub fn check_closed(&self) -> PyResult<()> {
        if self.closed() {
            return Err(PyRuntimeError::new_err("Event loop is closed"));
        }
        Ok(())
    }

    /// A handle's context (a copy of the current one unless given) and, in debug mode, its
    /// creation stack.
    #[inline(always)]
    pub fn handle_parts(
        &self,
        py: Python<'_>,
        context: Option<Py<PyAny>>,
        debug: bool,
    ) -> PyResult<HandleParts> {
        let context = match context {
            Some(c) if !c.is_none(py) => Some(c),
            // An empty snapshot is run in a new empty context (see `handles::HandleState`):
            // an empty current context is not copied at all where the thread state can be
            // read, and elsewhere the copy goes straight back to CPython's freelist.
            _ => match current_context_is_empty(py) {
                Some(true) => None,
                Some(false) => Some(copy_context(py)?.unbind()),
                None => Some(copy_context(py)?)
                    .filter(|c| !context_is_empty(c))
                    .map(Bound::unbind),
            },
        };
        let tb = if debug {
            Some(
                format_module(py)?
                    .call_method0(intern!(py, "extract_stack"))?
                    .unbind(),
            )
        } else {
            None
        };
        Ok((context, tb))
    }

    /// A new handle (for the ready queue or an fd watcher): a recycled one from the
    /// freelist when there is one.
    #[inline(always)]
    pub fn make_handle(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
        debug: bool,
    ) -> PyResult<Py<Handle>> {
        let (context, tb) = self.handle_parts(py, context, debug)?;
        self.handle(py, callback, args, context, tb, debug)
    }

    /// A watcher on `fd` (the number `fileobj` gave), after the checks `add_reader` makes:
    /// the loop is open, and an fd not watched yet is one the driver can poll.
    #[allow(clippy::too_many_arguments)]
    pub fn add_watcher_checked(
        &self,
        py: Python<'_>,
        fileobj: Py<PyAny>,
        fd: i32,
        side: Side,
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        self.add_watcher_as(py, fileobj, fd, side, callback, args, false, context)
    }

    // `add_watcher_checked`, armed as one multishot poll when `multi` (see
    // `core/watchers.rs`).
    #[allow(clippy::too_many_arguments)]
    fn add_watcher_as(
        &self,
        py: Python<'_>,
        fileobj: Py<PyAny>,
        fd: i32,
        side: Side,
        callback: Py<PyAny>,
        args: Args,
        multi: bool,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        self.check_closed()?;
        let already = self
            .queues
            .with(py, |q| q.watchers.get(py, fd, side).is_some());
        if !already {
            crate::sys::fd_check_pollable(fd).map_err(|e| os_error(&e))?;
        }
        self.install_watcher(py, fileobj, fd, side, callback, args, multi, context)
    }

    /// [`add_watcher_checked`](Self::add_watcher_checked) for an fd known to be pollable:
    /// the `sock_*` methods just had the kernel take it as a socket, so
    /// `fd_check_pollable`'s two syscalls would only cost time.
    pub fn add_watcher_fd(
        &self,
        py: Python<'_>,
        fileobj: Py<PyAny>,
        fd: i32,
        side: Side,
        callback: Py<PyAny>,
        args: Args,
    ) -> PyResult<Py<Handle>> {
        self.install_watcher(py, fileobj, fd, side, callback, args, false, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn install_watcher(
        &self,
        py: Python<'_>,
        fileobj: Py<PyAny>,
        fd: i32,
        side: Side,
        callback: Py<PyAny>,
        args: Args,
        multi: bool,
        context: Option<Py<PyAny>>,
    ) -> PyResult<Py<Handle>> {
        self.check_closed()?;
        let debug = self.debug();
        let handle = self.make_handle(py, callback, args, context, debug)?;
        // A queue's handle is left out of the collector's walks while it waits its turn;
        // a watcher's lives as long as its watcher, and a cycle through its callback (a
        // reader's bound method on an object that holds the loop) must stay collectable.
        gc_track(handle.bind(py).as_any());
        let ret = handle.clone_ref(py);
        let replaced = self
            .queues
            .with(py, |q| q.watchers.add(fd, side, handle, fileobj, multi));
        if let Some((old, _unused_fileobj)) = replaced {
            Handle::cancel_inner(old.bind(py))?;
        }
        Ok(ret)
    }

    /// Removes the watcher of `fd`/`side`, if any (the caller checked the loop is open).
    pub fn remove_watcher_fd(&self, py: Python<'_>, fd: i32, side: Side) -> PyResult<bool> {
        let removed = self.queues.with(py, |q| q.watchers.remove(fd, side));
        self.finish_removal(py, removed)
    }

    /// Removes the watcher of `fd`/`side` only while `handle` is still its handle (asyncio's
    /// `_sock_read_done` rule: a later `add_reader` on the fd replaced it, and removing would
    /// strand that caller).
    pub fn remove_watcher_if(
        &self,
        py: Python<'_>,
        fd: i32,
        side: Side,
        handle: &Py<Handle>,
    ) -> PyResult<bool> {
        if self.closed() {
            return Ok(false);
        }
        let current = self.queues.with(py, |q| q.watchers.get(py, fd, side));
        if !current.is_some_and(|h| h.is(handle)) {
            return Ok(false);
        }
        self.remove_watcher_fd(py, fd, side)
    }

    fn finish_removal(&self, py: Python<'_>, removed: Option<Removed>) -> PyResult<bool> {
        match removed {
            Some((h, _fileobj)) => {
                Handle::cancel_inner(h.bind(py))?;
                // A poll in flight holds the fd's file: cancel it now, so a close() right
                // after this call closes the socket at once, as with a selector. Nothing is
                // in flight (no syscall) when the watcher's own callback removes it.
                self.submit_cancels(py).map_err(|e| os_error(&e))?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Stops an accept started by `accept_start`, telling the kernel at once: connections
    /// that arrive from now on wait in the listen backlog.
    pub fn stop_accept(&self, py: Python<'_>, token: u64) -> PyResult<()> {
        self.accept_stop(py, token);
        self.submit_cancels(py).map_err(|e| os_error(&e))
    }
}
