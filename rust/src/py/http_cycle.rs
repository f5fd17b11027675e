//! `rsloop._rsloop.HttpCycle`: the state of one request and its response, and the ASGI
//! `send` of `rsloop.http`. `send` runs in Rust: a response start builds the head and
//! writes it, a body writes itself and, when it is the last, ends the response; the
//! awaitable it returns is already done, so `await send(message)` makes no coroutine.
//! The rest of the request cycle (`receive`, running the app) is the Python subclass
//! `rsloop.http._Cycle`, which reads and sets this state through the attributes.
//! Owns: the response framing and the checks uvicorn makes on what an app sends.
//! Not: parsing (`py::http`), flow control and waiting (the Python subclass).

use pyo3::exceptions::{PyBaseException, PyKeyError, PyRuntimeError, PyStopIteration};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use pyo3::PyTraverseError;

use super::http::{chunk, write_head};
use crate::ffi::iternext::{IterNext, Next};

/// One request's response side (see the module). Built per request by the protocol:
/// `HttpCycle(scope, transport, flow, default_headers, access_log, keep_alive,
/// expect_continue, whole, on_response)`; `whole` when the request has come in full
/// without a body (its one `receive()` then needs no wait).
#[pyclass(subclass, module = "rsloop._rsloop", name = "HttpCycle")]
pub struct HttpCycle {
    #[pyo3(get)]
    scope: Py<PyDict>,
    #[pyo3(get)]
    transport: Py<PyAny>,
    #[pyo3(get)]
    flow: Py<PyAny>,
    default_headers: Py<PyAny>,
    /// Called when the response ends (then dropped: once per cycle); the protocol's
    /// bookkeeping.
    #[pyo3(get, set)]
    on_response: Option<Py<PyAny>>,
    access_log: bool,
    /// A response to HEAD: no body goes out (read from the scope at the start).
    is_head: bool,
    #[pyo3(get, set)]
    keep_alive: bool,
    #[pyo3(get, set)]
    disconnected: bool,
    #[pyo3(get, set)]
    waiting_for_100_continue: bool,
    /// More of the request body is to come.
    #[pyo3(get, set)]
    more_body: bool,
    /// The next `receive()` returns without waiting.
    #[pyo3(get, set)]
    woken: bool,
    /// The future a waiting `receive()` awaits.
    #[pyo3(get, set)]
    waiter: Option<Py<PyAny>>,
    /// Request body received and not yet handed to the app (a bytearray).
    #[pyo3(get, set)]
    body: Py<PyAny>,
    #[pyo3(get)]
    response_started: bool,
    #[pyo3(get)]
    response_complete: bool,
    chunked: bool,
    expected_length: u64,
}

/// `HTTP/1.1 <status> <phrase>\r\n` for each status uvicorn answers (100..599), keyed as
/// uvicorn's `STATUS_LINE` dict is: a status outside it is a `KeyError`.
static STATUS_LINES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();

fn status_lines(py: Python<'_>) -> PyResult<&Bound<'_, PyDict>> {
    let lines = STATUS_LINES.get_or_try_init(py, || {
        let http_status = py.import("http")?.getattr("HTTPStatus")?;
        let lines = PyDict::new(py);
        for status in 100u16..600 {
            let phrase = match http_status.call1((status,)) {
                Ok(s) => s.getattr("phrase")?.extract::<String>()?,
                Err(_) => String::new(),
            };
            let line = format!("HTTP/1.1 {status} {phrase}\r\n");
            lines.set_item(status, PyBytes::new(py, line.as_bytes()))?;
        }
        Ok::<_, PyErr>(lines.unbind())
    })?;
    Ok(lines.bind(py))
}

/// `message[key]`, or `None` when absent (`message.get(key)` for a mapping not a dict).
fn item<'py>(
    message: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match message.cast::<PyDict>() {
        Ok(dict) => dict.get_item(key),
        Err(_) => {
            let value = message.call_method1(intern!(message.py(), "get"), (key,))?;
            Ok((!value.is_none()).then_some(value))
        }
    }
}

/// `message[key]`: a `KeyError` when absent, as subscripting raises it.
fn required<'py>(
    message: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    match message.cast::<PyDict>() {
        Ok(_) => item(message, key)?.ok_or_else(|| PyKeyError::new_err(key.clone().unbind())),
        Err(_) => message.get_item(key),
    }
}

fn is(kind: &Bound<'_, PyAny>, name: &str) -> bool {
    kind.cast::<PyString>()
        .is_ok_and(|s| s.to_str().is_ok_and(|s| s == name))
}

/// The already-done awaitable `send` returns. It is a coroutine as `collections.abc`
/// defines one (it has the four methods), so what takes a coroutine takes it:
/// `asyncio.create_task(send(message))`, anyio's `start_soon`; each run of it returns
/// `None` at once.
#[pyclass(frozen, module = "rsloop._rsloop", name = "HttpSent")]
pub struct HttpSent;

#[pymethods]
impl HttpSent {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Replaced as the type's `tp_iternext` by `HttpSentNext`; kept as the method.
    fn __next__(&self) -> Option<()> {
        None
    }

    /// `coro.send(value)`: done, so `StopIteration` with the result `None`.
    fn send(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let _ = value;
        Err(PyStopIteration::new_err(()))
    }

    /// `coro.throw(exc)`: nothing left to run, so the exception comes straight back, as
    /// from a coroutine that has not started (the old three-argument form included).
    #[pyo3(signature = (typ, val = None, tb = None))]
    fn throw(
        &self,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = tb;
        if typ.is_instance_of::<PyBaseException>() {
            return Err(PyErr::from_value(typ.clone()));
        }
        let exc = match val {
            Some(val) if val.is_instance_of::<PyBaseException>() => val.clone(),
            Some(val) if !val.is_none() => typ.call1((val,))?,
            _ => typ.call0()?,
        };
        Err(PyErr::from_value(exc))
    }

    fn close(&self) {}
}

/// `next(sent)`: done at once, returning `None`.
pub struct HttpSentNext;

impl IterNext for HttpSentNext {
    type Class = HttpSent;

    fn next(_slf: &Bound<'_, HttpSent>) -> PyResult<Next> {
        Ok(Next::Return(None))
    }
}

static SENT: PyOnceLock<Py<HttpSent>> = PyOnceLock::new();

fn sent(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let sent = SENT.get_or_try_init(py, || Py::new(py, HttpSent))?;
    Ok(sent.clone_ref(py).into_any())
}

#[pymethods]
impl HttpCycle {
    #[new]
    #[pyo3(signature = (scope, transport, flow, default_headers, access_log, keep_alive, expect_continue, whole, on_response))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        scope: &Bound<'_, PyDict>,
        transport: Py<PyAny>,
        flow: Py<PyAny>,
        default_headers: Py<PyAny>,
        access_log: bool,
        keep_alive: bool,
        expect_continue: bool,
        whole: bool,
        on_response: Py<PyAny>,
    ) -> PyResult<Self> {
        let py = scope.py();
        Ok(HttpCycle {
            scope: scope.clone().unbind(),
            transport,
            flow,
            default_headers,
            on_response: Some(on_response),
            access_log,
            is_head: false,
            keep_alive,
            disconnected: false,
            waiting_for_100_continue: expect_continue,
            more_body: !whole,
            woken: whole,
            waiter: None,
            body: pyo3::types::PyByteArray::new(py, b"").into_any().unbind(),
            response_started: false,
            response_complete: false,
            chunked: false,
            expected_length: 0,
        })
    }

    /// The ASGI `send`. On the common path (writing not paused, the client there) the
    /// message is sent now and a done awaitable returned; otherwise the Python
    /// `_send_slow(message)` coroutine, which waits for the transport to drain first.
    fn send(slf: &Bound<'_, Self>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let (disconnected, flow) = {
            let this = slf.borrow();
            (this.disconnected, this.flow.clone_ref(py))
        };
        if disconnected
            || flow
                .bind(py)
                .getattr(intern!(py, "write_paused"))?
                .is_truthy()?
        {
            return Ok(slf
                .call_method1(intern!(py, "_send_slow"), (message,))?
                .unbind());
        }
        Self::_send_now(slf, message)?;
        sent(py)
    }

    /// Sends `message` now (`send` without the wait for a paused transport).
    fn _send_now(slf: &Bound<'_, Self>, message: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let kind = required(message, intern!(py, "type"))?;
        let (started, complete) = {
            let this = slf.borrow();
            (this.response_started, this.response_complete)
        };
        if !started {
            if !is(&kind, "http.response.start") {
                return Err(PyRuntimeError::new_err(format!(
                    "Expected ASGI message 'http.response.start', but got '{}'.",
                    kind.str()?
                )));
            }
            Self::start(slf, message)
        } else if !complete {
            if !is(&kind, "http.response.body") {
                return Err(PyRuntimeError::new_err(format!(
                    "Expected ASGI message 'http.response.body', but got '{}'.",
                    kind.str()?
                )));
            }
            Self::body(slf, message)
        } else {
            Err(PyRuntimeError::new_err(format!(
                "Unexpected ASGI message '{}' sent, after response already completed.",
                kind.str()?
            )))
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.scope)?;
        visit.call(&self.transport)?;
        visit.call(&self.flow)?;
        visit.call(&self.default_headers)?;
        if let Some(on_response) = &self.on_response {
            visit.call(on_response)?;
        }
        visit.call(&self.body)?;
        if let Some(waiter) = &self.waiter {
            visit.call(waiter)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.waiter = None;
        self.on_response = None;
    }
}

impl HttpCycle {
    /// `http.response.start`: the head, built and written.
    fn start(slf: &Bound<'_, Self>, message: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let status = required(message, intern!(py, "status"))?;
        let is_head = {
            let scope = slf.borrow().scope.clone_ref(py);
            let method = scope.bind(py).get_item(intern!(py, "method"))?;
            method.is_some_and(|m| is(&m, "HEAD"))
        };
        let (access_log, default_headers, keep_alive, transport) = {
            let mut this = slf.borrow_mut();
            this.is_head = is_head;
            this.response_started = true;
            this.waiting_for_100_continue = false;
            (
                this.access_log,
                this.default_headers.clone_ref(py),
                this.keep_alive,
                this.transport.clone_ref(py),
            )
        };
        if access_log {
            slf.call_method1(intern!(py, "_log_access"), (&status,))?;
        }
        let line = status_lines(py)?
            .get_item(&status)?
            .ok_or_else(|| PyKeyError::new_err(status.clone().unbind()))?;
        let line = line.cast_into::<PyBytes>()?;
        let headers = match item(message, intern!(py, "headers"))? {
            Some(headers) => headers,
            None => PyTuple::empty(py).into_any(),
        };
        let mut out = Vec::with_capacity(256);
        let framing = write_head(
            py,
            &mut out,
            line.as_bytes(),
            [default_headers.bind(py), &headers],
            is_head,
            status.extract::<u16>()?,
            keep_alive,
        )?;
        {
            let mut this = slf.borrow_mut();
            this.chunked = framing.chunked;
            this.expected_length = framing.content_length;
            this.keep_alive = framing.keep_alive;
        }
        transport
            .bind(py)
            .call_method1(intern!(py, "write"), (PyBytes::new(py, &out),))?;
        Ok(())
    }

    /// `http.response.body`: written as the head framed it; the last one ends the
    /// response.
    fn body(slf: &Bound<'_, Self>, message: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let body = match item(message, intern!(py, "body"))? {
            Some(body) => body,
            None => PyBytes::new(py, b"").into_any(),
        };
        let more_body = match item(message, intern!(py, "more_body"))? {
            Some(more) => more.is_truthy()?,
            None => false,
        };
        let (is_head, chunked, expected, transport) = {
            let this = slf.borrow();
            (
                this.is_head,
                this.chunked,
                this.expected_length,
                this.transport.clone_ref(py),
            )
        };
        let transport = transport.bind(py);
        let write = intern!(py, "write");
        let mut left = expected;
        if is_head {
            left = 0;
        } else if chunked {
            transport.call_method1(write, (chunk(py, &body, !more_body)?,))?;
        } else {
            let len = body.len()? as u64;
            if len > expected {
                return Err(PyRuntimeError::new_err(
                    "Response content longer than Content-Length",
                ));
            }
            left = expected - len;
            if len > 0 {
                transport.call_method1(write, (&body,))?;
            }
        }
        slf.borrow_mut().expected_length = left;
        if more_body {
            return Ok(());
        }
        if left != 0 {
            return Err(PyRuntimeError::new_err(
                "Response content shorter than Content-Length",
            ));
        }
        let (waiter, keep_alive, on_response) = {
            let mut this = slf.borrow_mut();
            this.response_complete = true;
            this.woken = true;
            (
                this.waiter.as_ref().map(|w| w.clone_ref(py)),
                this.keep_alive,
                this.on_response.take(),
            )
        };
        if let Some(waiter) = waiter {
            let waiter = waiter.bind(py);
            if !waiter.call_method0(intern!(py, "done"))?.is_truthy()? {
                waiter.call_method1(intern!(py, "set_result"), (py.None(),))?;
            }
        }
        if !keep_alive {
            transport.call_method0(intern!(py, "close"))?;
        }
        if let Some(on_response) = on_response {
            on_response.bind(py).call0()?;
        }
        Ok(())
    }
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HttpCycle>()?;
    m.add_class::<HttpSent>()?;
    crate::ffi::iternext::install::<HttpSentNext>(m.py());
    Ok(())
}
